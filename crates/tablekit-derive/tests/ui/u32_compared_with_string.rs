use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
}

fn main() {
    let _ = Employee::ID.eq("223");
}
