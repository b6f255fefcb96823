use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    email: String,
}

fn main() {
    let _ = Employee::EMIAL.eq("jonesj@contoso.com");
}
