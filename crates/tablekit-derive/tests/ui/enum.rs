use tablekit::TableEntity;

#[derive(TableEntity)]
#[table(partition_key = "p", row_key = "r")]
enum Shape {
    Circle { radius: f64 },
    Square { side: f64 },
}

fn main() {}
