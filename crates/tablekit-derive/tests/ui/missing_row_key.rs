use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}")]
struct Employee {
    department: String,
    id: u32,
}

fn main() {}
