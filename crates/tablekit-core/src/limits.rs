//! The Table service's limits, checked before any request is sent (Azurite does not enforce
//! all of them; Azure does).

/// Properties per entity including PartitionKey, RowKey and Timestamp.
pub const MAX_PROPERTIES_INCL_SYSTEM: usize = 255;
/// User properties per entity.
pub const MAX_USER_PROPERTIES: usize = 252;
/// Size of an entity, counted the way the service counts (see [`crate::limits`]).
pub const MAX_ENTITY_BYTES: usize = 1 << 20;
/// Size of a PartitionKey or RowKey (UTF-16 code units × 2).
pub const MAX_KEY_BYTES: usize = 1024;
/// Size of one String (UTF-16 code units × 2) or Binary property.
pub const MAX_PROPERTY_BYTES: usize = 64 * 1024;
/// Length of a property name, in characters.
pub const MAX_PROPERTY_NAME_CHARS: usize = 255;
/// Operations in one entity group transaction.
pub const MAX_TRANSACTION_OPERATIONS: usize = 100;
/// Largest allowed request body of an entity group transaction: the service requires it to be
/// *less than* 4 MiB.
pub const MAX_TRANSACTION_BYTES: usize = (4 << 20) - 1;
/// Entities per query response page.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Seconds a query segment may run before the service returns a continuation token.
pub const QUERY_MAX_EXECUTION_SECS: u64 = 5;
/// Size of a queue message's text.
pub const MAX_QUEUE_MESSAGE_BYTES: usize = 64 * 1024;
/// Entities per second one partition is designed to serve (1 KiB entities).
pub const TARGET_ENTITIES_PER_SEC_PARTITION: u32 = 2_000;
/// Entities per second one account is designed to serve (1 KiB entities).
pub const TARGET_ENTITIES_PER_SEC_ACCOUNT: u32 = 20_000;
