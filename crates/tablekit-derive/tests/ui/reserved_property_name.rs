use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
struct Employee {
    department: String,
    id: String,
    // PascalCase makes this `Timestamp`, which the service sets.
    timestamp: String,
    #[serde(rename = "RowKey")]
    row: String,
}

fn main() {}
