use tablekit::TableEntity;

// A literal `/` can never be in a key.
#[derive(TableEntity)]
#[table(partition_key = "sales/{region}", row_key = "{id}")]
struct Forbidden {
    region: String,
    id: String,
}

// A key field must be stored, or a read could not rebuild it.
#[derive(TableEntity)]
#[table(partition_key = "{region}", row_key = "{id}")]
struct Skipped {
    region: String,
    #[serde(skip)]
    id: String,
}

// Zero padding needs an integer, ticks a DateTime<Utc>.
#[derive(TableEntity)]
#[table(partition_key = "{region:04}", row_key = "{id:ticks}")]
struct WrongTypes {
    region: String,
    id: u64,
}

fn main() {}
