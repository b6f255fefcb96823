//! The poison record: a failed message's original payload, byte for byte, behind a one-line
//! header that says why it failed.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tablekit_azure::Message;
use tablekit_core::limits::MAX_QUEUE_MESSAGE_BYTES;
use tablekit_core::{Error, Limit, Result, Target};

use crate::job::{Job, decode};

/// The first bytes of every poison message.
pub const POISON_MAGIC: &str = "tablekit-poison/1 ";

/// Longest failure reason kept, in bytes (longer ones are cut at a character boundary).
pub const MAX_REASON_BYTES: usize = 512;

/// Raw bytes one queue message can carry (its base64 text is limited to 64 KiB).
const MAX_RAW_BYTES: usize = MAX_QUEUE_MESSAGE_BYTES / 4 * 3;

/// A message moved to the poison queue: where it came from, why it failed, and its original
/// payload, unchanged.
///
/// On the poison queue it is stored as one line of header, a newline, then the payload:
///
/// ```text
/// tablekit-poison/1 {"queue":"jobs","id":"…","dequeue_count":5,"kind":"archive-employee","inserted":"…","poisoned_at":"…","reason":"…"}
/// {"kind":"archive-employee","job":{…}}
/// ```
///
/// The header is compact JSON (it never contains a newline), so everything after the first
/// newline is the original payload byte for byte, whatever it contains. Any queue client can
/// read it; [`PoisonRecord::parse`] does it for you.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoisonRecord {
    /// The queue the message was taken from.
    #[serde(rename = "queue")]
    pub source_queue: String,
    /// Its message id on that queue.
    #[serde(rename = "id")]
    pub message_id: String,
    /// How many times it had been dequeued when it was moved.
    pub dequeue_count: u64,
    /// The job kind its envelope names, if it is a job envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// When it was first enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inserted: Option<DateTime<Utc>>,
    /// When it was moved to the poison queue.
    pub poisoned_at: DateTime<Utc>,
    /// Why: the last handler error, or what made the message undecodable.
    pub reason: String,
    /// The original payload, byte for byte.
    #[serde(skip)]
    pub payload: Vec<u8>,
}

impl fmt::Debug for PoisonRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoisonRecord")
            .field("source_queue", &self.source_queue)
            .field("message_id", &self.message_id)
            .field("dequeue_count", &self.dequeue_count)
            .field("kind", &self.kind)
            .field("poisoned_at", &self.poisoned_at)
            .field("reason", &self.reason)
            .field("payload_len", &self.payload.len())
            .finish_non_exhaustive()
    }
}

fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl PoisonRecord {
    /// The record for `message`, failed for `reason`. The reason is cut to
    /// [`MAX_REASON_BYTES`].
    pub(crate) fn new(queue: &str, message: &Message, reason: &str) -> Self {
        Self {
            source_queue: queue.to_owned(),
            message_id: message.id.clone(),
            dequeue_count: message.dequeue_count,
            kind: crate::job::kind_of(&message.payload).filter(|k| k.len() <= 64),
            inserted: Some(message.inserted),
            poisoned_at: Utc::now(),
            reason: cut(reason, MAX_REASON_BYTES).to_owned(),
            payload: message.payload.clone(),
        }
    }

    /// The poison message's bytes: header line, newline, payload. The reason is shortened
    /// further if the whole would not fit one queue message.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] when the payload alone leaves no room for a header (only
    /// possible for messages not enqueued through [`crate::JobQueue`]).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let budget = MAX_RAW_BYTES.saturating_sub(self.payload.len() + 1);
        let mut record = self.clone();
        loop {
            let header = serde_json::to_string(&record)
                .map_err(|e| Error::encode("reason", e.to_string()))?;
            let line_len = POISON_MAGIC.len() + header.len();
            if line_len <= budget {
                let mut out = Vec::with_capacity(line_len + 1 + self.payload.len());
                out.extend_from_slice(POISON_MAGIC.as_bytes());
                out.extend_from_slice(header.as_bytes());
                out.push(b'\n');
                out.extend_from_slice(&self.payload);
                return Ok(out);
            }
            if record.reason.is_empty() {
                return Err(Error::LimitExceeded {
                    limit: Limit::Custom {
                        what: "payload bytes of a message moved to the poison queue".into(),
                        max: MAX_RAW_BYTES.saturating_sub(line_len + 1),
                    },
                    actual: self.payload.len(),
                });
            }
            let shorter = cut(&record.reason, record.reason.len() / 2).to_owned();
            record.reason = shorter;
        }
    }

    /// Reads a poison message's bytes back.
    ///
    /// # Errors
    /// [`Error::Decode`] when `bytes` is not a poison record (a message someone put on
    /// the poison queue by hand, or another format).
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let invalid =
            |why: &str| Error::decode(Target::default(), "", format!("not a poison record: {why}"));
        let rest = bytes
            .strip_prefix(POISON_MAGIC.as_bytes())
            .ok_or_else(|| invalid("missing the `tablekit-poison/1` header"))?;
        let newline = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| invalid("no newline after the header"))?;
        let mut record: PoisonRecord =
            serde_json::from_slice(&rest[..newline]).map_err(|e| invalid(&e.to_string()))?;
        record.payload = rest[newline + 1..].to_vec();
        Ok(record)
    }

    /// Decodes the original payload as a job of type `J`.
    ///
    /// # Errors
    /// [`Error::Decode`] when the payload is not a `J` job envelope.
    pub fn job<J: Job>(&self) -> Result<J> {
        decode::<J>(&self.payload)
            .map_err(|refused| Error::decode(Target::default(), "", refused.reason()))
    }
}

/// A message dequeued from the poison queue: its record, and the receipt needed to
/// [re-enqueue](crate::JobQueue::requeue) or [discard](crate::JobQueue::discard) it.
#[derive(Debug, Clone)]
pub struct Poisoned {
    /// The parsed record.
    pub record: PoisonRecord,
    pub(crate) message: Message,
}

impl Poisoned {
    /// The poison-queue message itself (id, receipt, dequeue count on the poison queue).
    pub fn message(&self) -> &Message {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: Vec<u8>) -> Message {
        Message {
            id: "3f2a".into(),
            pop_receipt: "r".into(),
            dequeue_count: 5,
            payload,
            inserted: Utc::now(),
            next_visible: Utc::now(),
            expires: Utc::now(),
        }
    }

    #[test]
    fn the_payload_survives_byte_for_byte_whatever_it_contains() {
        let payloads: [Vec<u8>; 4] = [
            br#"{"kind":"archive-employee","job":{"id":1}}"#.to_vec(),
            b"line one\nline two\n\n".to_vec(),
            (0..=255).collect(),
            Vec::new(),
        ];
        for payload in payloads {
            let record = PoisonRecord::new("jobs", &message(payload.clone()), "boom\n\"quoted\"");
            let bytes = record.encode().unwrap();
            assert!(bytes.starts_with(POISON_MAGIC.as_bytes()));
            let back = PoisonRecord::parse(&bytes).unwrap();
            assert_eq!(back.payload, payload);
            assert_eq!(back, record);
        }
    }

    #[test]
    fn the_header_names_source_kind_count_and_reason() {
        let payload = br#"{"kind":"archive-employee","job":{"id":1}}"#.to_vec();
        let record = PoisonRecord::new("jobs", &message(payload), "handler said no");
        let bytes = record.encode().unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let header = text.lines().next().unwrap();
        for needle in [
            r#""queue":"jobs""#,
            r#""id":"3f2a""#,
            r#""dequeue_count":5"#,
            r#""kind":"archive-employee""#,
            r#""reason":"handler said no""#,
        ] {
            assert!(header.contains(needle), "{needle} in {header}");
        }
    }

    #[test]
    fn long_reasons_are_cut_and_huge_payloads_shrink_the_reason_to_fit() {
        let record = PoisonRecord::new("jobs", &message(b"x".to_vec()), &"é".repeat(1000));
        assert!(record.reason.len() <= MAX_REASON_BYTES && !record.reason.is_empty());
        let big = vec![b'y'; crate::job::MAX_JOB_BYTES];
        let record = PoisonRecord::new("jobs", &message(big.clone()), &"\u{1}".repeat(500));
        let bytes = record.encode().unwrap();
        assert!(bytes.len() <= MAX_RAW_BYTES);
        assert_eq!(PoisonRecord::parse(&bytes).unwrap().payload, big);
        let too_big = vec![b'z'; MAX_RAW_BYTES - 10];
        let record = PoisonRecord::new("jobs", &message(too_big), "r");
        assert!(matches!(record.encode(), Err(Error::LimitExceeded { .. })));
    }

    #[test]
    fn foreign_bytes_are_not_records() {
        for bytes in [
            &b"hello"[..],
            b"tablekit-poison/1 {}",
            b"tablekit-poison/1 nope\n",
        ] {
            assert!(matches!(
                PoisonRecord::parse(bytes),
                Err(Error::Decode { .. })
            ));
        }
    }
}
