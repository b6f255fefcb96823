//! Heterogeneous entities: a department and its employees in one partition, each row
//! carrying its `EntityType` and each type's RowKeys sharing a prefix, so one transaction
//! can write both types, a range reads one type and a partition query reads them all.

use tablekit::core::OrUnknown;
use tablekit::core::batch::BatchPlan;
use tablekit::index::{EntityKind, TypedRows};
use tablekit::prelude::*;
use tablekit_examples::{Meter, unique_name};

// ANCHOR: kinds
/// An employee, at `Sales/EMPLOYEE_000123`.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "EMPLOYEE_{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
}

/// Its department, at `Sales/DEPARTMENT_Sales`.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{name}", row_key = "DEPARTMENT_{name}")]
struct Department {
    name: String,
    manager_id: u32,
    employee_count: i64,
}

impl EntityKind for Employee {
    const ENTITY_TYPE: &'static str = "Employee";
    const ROW_PREFIX: &'static str = "EMPLOYEE_";
}

impl EntityKind for Department {
    const ENTITY_TYPE: &'static str = "Department";
    const ROW_PREFIX: &'static str = "DEPARTMENT_";
}

/// Any row of a department's partition, told apart by its `EntityType`.
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "EntityType")]
enum SalesRow {
    Employee(Employee),
    Department(Department),
}
// ANCHOR_END: kinds

fn employee(id: u32, first: &str, last: &str) -> Employee {
    Employee {
        department: "Sales".into(),
        id,
        first_name: first.into(),
        last_name: last.into(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    println!("heterogeneous-entities on {}", account.name());
    let mut meter = Meter::new(&account);
    let table = account.table(&unique_name("Mixed"))?;
    table.create().await?;

    // ANCHOR: write
    let rows = TypedRows::new(table.clone());
    let sales = Department {
        name: "Sales".into(),
        manager_id: 223,
        employee_count: 2,
    };
    // Different types in one partition, so one transaction can write them together; each
    // row gets its `EntityType`.
    let plan = BatchPlan::atomic([
        TypedRows::insert_operation(&sales)?,
        TypedRows::insert_operation(&employee(123, "Lee", "Hall"))?,
        TypedRows::insert_operation(&employee(223, "Jun", "Jones"))?,
    ])?;
    table.submit(&plan).await?;
    // ANCHOR_END: write
    meter.report("create the table; one transaction, two entity types");

    // ANCHOR: read
    // DEPARTMENT_Sales, then EMPLOYEE_000123, EMPLOYEE_000223: each type contiguous.
    let mixed: Vec<Stored<OrUnknown<SalesRow>>> = rows.all("Sales").collect().await?;
    // Only the employees: a range over their prefix, no other type read.
    let staff: Vec<Stored<Employee>> = rows.of_kind("Sales").collect().await?;
    // One row by its keys (here the value's own), checked to be a Department.
    let department: Option<Stored<Department>> = rows.get(&sales).await?;
    // ANCHOR_END: read
    meter.report("read the whole partition (1), only the employees (1), one department (1)");
    assert_eq!(department.map(|d| d.value.manager_id), Some(223));
    assert!(
        matches!(&mixed[0].value, OrUnknown::Known(SalesRow::Department(d)) if d.employee_count == 2)
    );
    assert!(
        matches!(&mixed[2].value, OrUnknown::Known(SalesRow::Employee(e)) if e.last_name == "Jones")
    );
    assert_eq!(staff.len(), 2);

    table.delete_table().await?;
    println!(
        "heterogeneous-entities: done, {} requests in total",
        meter.total()
    );
    Ok(())
}
