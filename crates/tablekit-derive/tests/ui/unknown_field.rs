use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{emial}")]
struct Employee {
    department: String,
    email: String,
}

fn main() {}
