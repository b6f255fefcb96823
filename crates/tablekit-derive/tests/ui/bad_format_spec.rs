use tablekit::TableEntity;

// `{id:6}` would pad with spaces, which does not keep numeric order.
#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:6}")]
struct Employee {
    department: String,
    id: u32,
}

fn main() {}
