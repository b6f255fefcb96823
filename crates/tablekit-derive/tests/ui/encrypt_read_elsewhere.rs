use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
struct AliasedSecret {
    department: String,
    id: String,
    #[table(encrypt)]
    #[serde(alias = "Mail")]
    email: String,
}

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
struct RenamedForReadingOnly {
    department: String,
    id: String,
    #[table(encrypt)]
    #[serde(rename(deserialize = "Mail"))]
    email: String,
}

fn main() {}
