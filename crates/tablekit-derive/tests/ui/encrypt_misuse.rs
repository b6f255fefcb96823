use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct NotAString {
    department: String,
    id: u32,
    #[table(encrypt)]
    salary: i64,
    #[table(encrypt)]
    nickname: Option<u32>,
}

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{email}")]
struct EncryptedKeyField {
    department: String,
    #[table(encrypt)]
    email: String,
}

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
struct EncryptedSkippedField {
    department: String,
    id: String,
    #[table(encrypt)]
    #[serde(skip)]
    cached: String,
}

fn main() {}
