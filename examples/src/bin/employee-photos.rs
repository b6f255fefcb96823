//! Employee photos: a 5 MiB photo per employee cannot be a property (64 KiB) or even an
//! entity (1 MiB), so it lives in a blob the employee entity references — written in an
//! order that never leaves a dangling reference, read with its hash verified, and swept
//! of orphans — with the request count of each step.
//!
//! `cargo xtask demo` runs it against Azurite; any account works with
//! `AZURE_STORAGE_CONNECTION_STRING="<cs>" cargo run -p tablekit-examples --bin employee-photos`.

use std::collections::BTreeMap;

use tablekit::azure::UploadOptions;
use tablekit::large::LargeEntities;
use tablekit::large::{Large, PK_METADATA, RK_METADATA, SweepOptions};
use tablekit::prelude::*;
use tablekit_examples::{report, unique_name};

// ANCHOR: model
/// An employee's ordinary properties, keyed by department and id; the photo's reference
/// (`PhotoBlob`, `PhotoLength`, `PhotoSha256`) is added next to them by the store.
#[derive(Debug, Clone, PartialEq, TableEntity)]
#[table(partition_key = "{department}", row_key = "{id:06}")]
struct Employee {
    department: String,
    id: u32,
    first_name: String,
    last_name: String,
    email: String,
}
// ANCHOR_END: model

/// A stand-in for a photo: `len` bytes of a pattern that changes with `seed`.
fn photo(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::from_env_or_emulator()?;
    let metrics = account.metrics().clone();

    // ANCHOR: setup
    let photos = account.container(&unique_name("photos"))?;
    photos.create().await?;
    let table = account.table(&unique_name("Employees"))?;
    table.create().await?;
    let store = LargeEntities::builder(table.clone(), photos.clone())
        .with_property("Photo")
        .with_content_type("image/jpeg")
        .build()?;
    // ANCHOR_END: setup
    println!(
        "employee-photos: table {}, container {} on {}",
        table.name(),
        photos.name(),
        account.name()
    );

    let before = metrics.snapshot();
    // ANCHOR: write
    let jun = Employee {
        department: "Sales".into(),
        id: 223,
        first_name: "Jun".into(),
        last_name: "Cao".into(),
        email: "junc@contoso.com".into(),
    };
    let first = photo(5 << 20, 1);
    let written = store.upsert(&jun, first.clone()).await?; // keys ("Sales", "000223") from the fields
    let reference = written.reference.expect("stored in a blob");
    println!("  entity references {reference}");
    // ANCHOR_END: write
    report(
        "put a 5 MiB photo (read, upload, insert)",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: read
    let read: Large<Employee> = store.get(&jun).await?.expect("just written");
    assert_eq!(read.entity.value, jun);
    assert_eq!(read.payload.as_ref(), first.as_slice());
    // ANCHOR_END: read
    report(
        "get employee and photo (entity, blob; hash verified)",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: read_entity
    let (entity, _): (Stored<Employee>, _) = store
        .get_entity(("Sales", "000223"))
        .await?
        .expect("exists");
    assert_eq!(entity.value.email, "junc@contoso.com");
    // ANCHOR_END: read_entity
    report(
        "get the employee without the photo",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: replace
    // A new photo, only over the version read above: uploaded under a new name, then the
    // entity is switched to it under that ETag, then the old blob is deleted. Readers see
    // the old photo or the new one.
    let second = photo(2 << 20, 2);
    let replaced = store
        .replace(&jun, second.clone(), entity.if_match())
        .await?;
    assert_ne!(replaced.reference.as_ref(), Some(&reference));
    // ANCHOR_END: replace
    report(
        "replace the photo (read, upload, replace, delete old blob)",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: replace_stale
    // The same ETag again: the photo changed since that read, so the replace is refused
    // after its read, before anything is uploaded.
    let stale = store
        .replace(&jun, photo(1 << 20, 4), entity.if_match())
        .await;
    assert!(matches!(stale, Err(Error::PreconditionFailed { .. })));
    // ANCHOR_END: replace_stale
    report(
        "replace on a stale ETag (read; refused)",
        &metrics.snapshot().since(&before),
    );
    let now: Large<Employee> = store.get(&jun).await?.expect("exists");
    assert_eq!(now.payload.as_ref(), second.as_slice());

    // A writer that crashed between its upload and its entity write leaves a blob no entity
    // references.
    let crashed = format!("{}crashed-upload", store.prefix());
    let owner = BTreeMap::from([
        (PK_METADATA.to_owned(), "Sales".to_owned()),
        (RK_METADATA.to_owned(), "000223".to_owned()),
    ]);
    let orphan = UploadOptions::default().with_metadata(owner);
    photos.upload(&crashed, photo(1000, 3), orphan).await?;

    let before = metrics.snapshot();
    // ANCHOR: sweep
    // The sweeper finds the orphan. `immediate()` skips the grace period, which is safe here
    // only because nothing else writes; a service sweeps with `SweepOptions::default()`,
    // whose grace outlasts any write still in flight.
    let swept = store.sweep(SweepOptions::immediate()).await?;
    println!(
        "  listed {}, referenced {}, deleted {:?}",
        swept.listed, swept.referenced, swept.deleted
    );
    assert_eq!(swept.deleted, [crashed]);
    assert_eq!(swept.referenced, 1);
    // ANCHOR_END: sweep
    report(
        "sweep (list, read the owner, delete the orphan)",
        &metrics.snapshot().since(&before),
    );

    let before = metrics.snapshot();
    // ANCHOR: delete
    // Deletes this version only: a photo replaced since the read would make it fail.
    store.delete(&jun, now.entity.if_match()).await?;
    // ANCHOR_END: delete
    report(
        "delete employee and photo (read, delete, delete blob)",
        &metrics.snapshot().since(&before),
    );
    assert!(photos.list(store.prefix()).await?.is_empty());
    table.delete_table().await?;
    photos.delete_container().await?;
    println!(
        "employee-photos: done, {} requests in total",
        metrics.snapshot().requests()
    );
    Ok(())
}
