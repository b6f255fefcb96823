use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
struct TwoActions {
    department: String,
    id: String,
    #[table(encrypt, sign)]
    email: String,
}

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
struct SignedAlias {
    department: String,
    id: String,
    #[table(sign)]
    #[serde(alias = "Pay")]
    salary: i64,
}

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
struct SignedReadElsewhere {
    department: String,
    id: String,
    #[table(sign)]
    #[serde(rename(deserialize = "Pay"))]
    salary: i64,
}

#[derive(TableEntity)]
#[table(partition_key = "{department}", row_key = "{id}")]
#[table(sign)]
struct OnTheStruct {
    department: String,
    id: String,
}

fn main() {}
