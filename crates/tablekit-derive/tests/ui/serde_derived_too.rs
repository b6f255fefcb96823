use serde::{Deserialize, Serialize};
use tablekit::TableEntity;

#[derive(Debug, TableEntity)]
#[derive(Serialize, Deserialize)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
}

#[derive(TableEntity)]
#[derive(Clone, serde::Deserialize)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Manager {
    department: String,
    id: u32,
}

fn main() {}
