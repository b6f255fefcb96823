use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "p", row_key = "r")]
struct Pair(String, u32);

fn main() {}
