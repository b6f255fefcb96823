use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "{pk}", row_key = "{rk}")]
struct Borrowed<'a> {
    pk: String,
    rk: &'a str,
}

#[derive(TableEntity)]
#[table(partition_key = "{pk}", row_key = "{rk}", rename_all = "kebab-case")]
struct Kebab {
    pk: String,
    rk: String,
}

#[derive(TableEntity)]
#[table(partition_key = "{pk}", row_key = "{rk}", partition = "x")]
struct UnknownAttribute {
    pk: String,
    rk: String,
}

#[derive(TableEntity)]
#[serde(rename_all = "camelCase")]
#[table(partition_key = "{pk}", row_key = "{rk}")]
struct SerdeCasing {
    pk: String,
    rk: String,
}

fn main() {}
