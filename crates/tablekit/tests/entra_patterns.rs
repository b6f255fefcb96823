//! Patterns run unchanged on an account that authenticates with Microsoft Entra ID tokens:
//! the intra-partition index, and an eventually consistent job through a worker — against
//! Azurite over HTTPS with `--oauth basic`.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tablekit::eventual::{Handler, Job, JobQueue, Steps, Worker, WorkerOptions};
use tablekit::index::{CopySpec, IndexRead, IndexSpec, IntraPartitionIndex};
use tablekit::prelude::*;
use tablekit_testkit::fixtures::{oauth_key_account, token_account};
use tablekit_testkit::{Claims, MintingCredential, unique_queue_name, unique_table_name};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Employee {
    department: String,
    id: String,
    email: String,
}

#[tokio::test]
async fn the_intra_partition_index_runs_on_tokens() {
    let credential = Arc::new(MintingCredential::new(Claims::valid()));
    let account = token_account(credential.clone());
    let table = account.table(&unique_table_name("EntraIndex")).unwrap();
    table.create().await.unwrap();
    let mut spec = IndexSpec::builder(|e: &Employee| e.department.clone());
    spec.primary(CopySpec::new("empid", |e: &Employee| e.id.clone()).with_width(6));
    let by_email = spec.secondary(CopySpec::new("email", |e: &Employee| e.email.clone()));
    let spec = spec.build().unwrap();
    let index = IntraPartitionIndex::new(table.clone(), spec);
    let jones = Employee {
        department: "Sales".into(),
        id: "000223".into(),
        email: "jonesj@contoso.com".into(),
    };
    index.insert(&jones).await.unwrap();
    let before = account.metrics().snapshot();
    let found = index
        .get_by(&by_email, "Sales", "jonesj@contoso.com")
        .await
        .unwrap()
        .expect("indexed");
    assert_eq!(found.value, jones);
    assert_eq!(account.metrics().snapshot().since(&before).requests(), 1);
    let moved = Employee {
        email: "jjones@contoso.com".into(),
        ..jones.clone()
    };
    let current = index.get("Sales", "000223").await.unwrap().expect("stored");
    index.replace(&current, &moved).await.unwrap();
    assert!(
        index
            .get_by(&by_email, "Sales", "jonesj@contoso.com")
            .await
            .unwrap()
            .is_none()
    );
    assert!(index.verify("Sales").await.unwrap().is_consistent());
    index
        .delete(("Sales", "000223"), IfMatch::Any)
        .await
        .unwrap();
    table.delete_table().await.unwrap();
    assert_eq!(credential.calls(), 1, "one token for the whole scenario");
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Archive {
    department: String,
    id: String,
}

impl Job for Archive {
    const KIND: &'static str = "archive";
}

/// The design guide's archive job: copy to Archive, delete from Current if unchanged.
struct Archiver {
    current: Table,
    archive: Table,
}

impl Handler<Archive> for Archiver {
    async fn handle(&self, job: Archive, steps: &Steps) -> tablekit::Result<()> {
        let keys = Keys::new(job.department, job.id)?;
        let Some(employee) = steps.get::<Employee>(&self.current, &keys).await? else {
            return Ok(());
        };
        steps
            .upsert_replace(&self.archive, &Entity::new(keys.clone(), &employee.value))
            .await?;
        steps
            .delete(&self.current, &keys, employee.if_match())
            .await?;
        Ok(())
    }
}

#[tokio::test]
async fn an_eventual_job_runs_through_a_worker_on_tokens() {
    let credential = Arc::new(MintingCredential::new(Claims::valid()));
    let account = token_account(credential.clone());
    let current = account.table(&unique_table_name("EntraCurrent")).unwrap();
    let archive = account.table(&unique_table_name("EntraArchive")).unwrap();
    current.create().await.unwrap();
    archive.create().await.unwrap();
    let keys = Keys::new("Sales", "000223").unwrap();
    let jones = Employee {
        department: "Sales".into(),
        id: "000223".into(),
        email: "jonesj@contoso.com".into(),
    };
    current
        .insert(&Entity::new(keys.clone(), &jones))
        .await
        .unwrap();

    let queue = JobQueue::<Archive>::new(account.queue(&unique_queue_name("entra-jobs")).unwrap());
    queue.create().await.unwrap();
    queue
        .enqueue(&Archive {
            department: "Sales".into(),
            id: "000223".into(),
        })
        .await
        .unwrap();
    let options = WorkerOptions::default()
        .with_visibility_timeout(Duration::from_secs(5))
        .with_poll_interval(Duration::from_millis(20))
        .with_idle_backoff_max(Duration::from_millis(100));
    let worker = Worker::new(
        queue.clone(),
        Archiver {
            current: current.clone(),
            archive: archive.clone(),
        },
        options,
    );
    let report = worker.drain().await.unwrap();
    assert_eq!((report.processed, report.poisoned), (1, 0), "{report:?}");

    // Checked through the key: the job moved the employee.
    let check = oauth_key_account();
    assert!(
        check
            .table(current.name())
            .unwrap()
            .get::<Employee>(&keys)
            .await
            .unwrap()
            .is_none()
    );
    let archived = check
        .table(archive.name())
        .unwrap()
        .get::<Employee>(&keys)
        .await
        .unwrap()
        .expect("archived");
    assert_eq!(archived.value, jones);
    assert_eq!(queue.approximate_len().await.unwrap(), 0);
    queue.delete_queues().await.unwrap();
    current.delete_table().await.unwrap();
    archive.delete_table().await.unwrap();
    assert_eq!(credential.calls(), 1);
    assert_eq!(account.metrics().snapshot().retries, 0);
}
