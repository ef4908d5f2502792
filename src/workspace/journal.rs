//! The ownership journal's record format: a pure encoder and reader (no I/O).
//!
//! Each request's inventory is also written, record by record, to an
//! append-only journal in the workspace's internal namespace
//! (`<internal>/journal/<id>`), so that a node started again on the same
//! workspace can prove which entries of a dead node's job tree it created.
//!
//! # Frame
//!
//! ```text
//! magic  u8      0xC7
//! len    u32 LE  payload length, 1..=MAX_PAYLOAD
//! payload        len bytes: tag u8, then the record's fields (all LE)
//! sum    [u8;16] the first 16 bytes of SHA-256(magic || len || payload)
//! ```
//!
//! # Reading
//!
//! [`read`] decodes records from the start and stops at the first frame it
//! cannot prove; nothing after that point is ever interpreted. It reports
//! why it stopped ([`Tail`]):
//!
//! - [`Tail::Clean`]: the bytes end exactly on a frame boundary.
//! - [`Tail::Torn`]: the bytes end inside a frame (fewer bytes than the
//!   header, or than the length announces). This is what a crash in the
//!   middle of an `append` leaves; the partial record is ignored.
//! - [`Tail::Corrupt`]: a complete frame whose magic, length bound,
//!   checksum or payload is wrong (a flipped bit, foreign bytes). The
//!   records before it stand; it and everything after are ignored.
//!
//! A flipped bit in the length field can make a frame look longer than the
//! bytes that remain, so it may be reported as `Torn` rather than `Corrupt`;
//! both stop the replay at the same offset, so the handling is the same. A
//! record the reader accepts was written by [`encode`]: a random change
//! passes the 128-bit checksum with probability 2^-128.
//!
//! Ignoring a record can never cause a deletion: the cleanup removes only
//! entries whose identity is proven by a record, and refuses a tree holding
//! anything else (see `docs/contracts/workspace-cleanup.md`, "The journal").

use sha2::{Digest, Sha256};

use super::inventory::{ArtifactKind, Inventory, InventoryError, JOB_ROOT};
use super::result::{CleanupCode, CleanupStatus};
use crate::fs::{BirthTime, Identity, MountId};

/// The first byte of every frame.
pub const MAGIC: u8 = 0xC7;
/// The largest payload a frame may announce (a name is at most 255 bytes).
pub const MAX_PAYLOAD: usize = 1024;
/// Bytes of SHA-256 kept per frame.
pub const SUM_LEN: usize = 16;
/// Frame bytes around the payload: magic, length and checksum.
pub const OVERHEAD: usize = 1 + 4 + SUM_LEN;

const TAG_OPEN: u8 = 1;
const TAG_INTENT: u8 = 2;
const TAG_CREATED: u8 = 3;
const TAG_CLEANUP: u8 = 4;
const TAG_VERDICT: u8 = 5;
const TAG_BARRIER: u8 = 6;
/// The largest barrier record ([`Record::Barrier`]) a journal holds.
pub const MAX_BARRIER: usize = 512;

/// One journal record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record {
    /// Written before the job directory is created: the request id, as the
    /// journal's file name also spells it.
    Open {
        /// The request id's bytes.
        request: Vec<u8>,
    },
    /// The job directory was created with this identity (inventory entry 0).
    JobCreated {
        /// The job directory's identity.
        identity: Identity,
    },
    /// Written before an entry is created: what is about to be created where.
    Intent {
        /// The parent's inventory index.
        parent: u32,
        /// File or directory.
        kind: ArtifactKind,
        /// The single-component name.
        name: Vec<u8>,
    },
    /// The entry announced by the latest [`Record::Intent`] was created and
    /// registered at inventory index `index` with this identity.
    Created {
        /// Its inventory index.
        index: u32,
        /// Its identity, as observed through its own descriptor.
        identity: Identity,
    },
    /// The request's barrier, as the layer above encoded it (opaque here:
    /// see `workspace::Revival::revive`). Written before anything behind
    /// the barrier may write into the job. The request layer's record names
    /// the request's cgroup (`<base>`, `<name>`, then its id), as the
    /// `Cgroup` record of earlier versions did, in the same bytes.
    Barrier {
        /// At most [`MAX_BARRIER`] bytes.
        record: Vec<u8>,
    },
    /// The request's cleanup started: nothing more is created.
    CleanupStarted,
    /// The cleanup's verdict.
    Verdict {
        /// How it ended.
        status: CleanupStatus,
        /// Why it failed, if it did.
        code: Option<CleanupCode>,
    },
}

/// Why [`read`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// At the end, on a frame boundary.
    Clean,
    /// At `offset`, inside a frame the bytes do not complete.
    Torn {
        /// Offset of the incomplete frame.
        offset: usize,
    },
    /// At `offset`, on a complete frame that does not verify or decode.
    Corrupt {
        /// Offset of the bad frame.
        offset: usize,
    },
}

/// What [`read`] proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The records of the verified prefix, in order.
    pub records: Vec<Record>,
    /// Bytes of the verified prefix (where the next append belongs).
    pub valid_len: usize,
    /// Why reading stopped.
    pub tail: Tail,
}

fn checksum(frame_head_and_payload: &[u8]) -> [u8; SUM_LEN] {
    let d = Sha256::digest(frame_head_and_payload);
    let mut out = [0u8; SUM_LEN];
    out.copy_from_slice(&d[..SUM_LEN]);
    out
}

/// Appends the frame of `record` to `out`.
pub fn encode(record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.push(MAGIC);
    out.extend_from_slice(&[0; 4]);
    let payload_start = out.len();
    match record {
        Record::Open { request } => {
            out.push(TAG_OPEN);
            put_bytes(out, request);
        }
        Record::JobCreated { identity } => {
            out.push(TAG_CREATED);
            out.extend_from_slice(&JOB_ROOT.to_le_bytes());
            put_identity(out, identity);
        }
        Record::Intent { parent, kind, name } => {
            out.push(TAG_INTENT);
            out.extend_from_slice(&parent.to_le_bytes());
            out.push(match kind {
                ArtifactKind::Dir => 0,
                ArtifactKind::File => 1,
            });
            put_bytes(out, name);
        }
        Record::Created { index, identity } => {
            out.push(TAG_CREATED);
            out.extend_from_slice(&index.to_le_bytes());
            put_identity(out, identity);
        }
        Record::Barrier { record } => {
            out.push(TAG_BARRIER);
            out.extend_from_slice(&record[..record.len().min(MAX_BARRIER)]);
        }
        Record::CleanupStarted => out.push(TAG_CLEANUP),
        Record::Verdict { status, code } => {
            out.push(TAG_VERDICT);
            out.push(status_byte(*status));
            out.push(code.map_or(0, code_byte));
        }
    }
    let len = u32::try_from(out.len() - payload_start).expect("payloads are small");
    out[start + 1..start + 5].copy_from_slice(&len.to_le_bytes());
    let sum = checksum(&out[start..]);
    out.extend_from_slice(&sum);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let len = u16::try_from(b.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&b[..usize::from(len)]);
}

fn put_identity(out: &mut Vec<u8>, id: &Identity) {
    out.extend_from_slice(&id.dev.to_le_bytes());
    out.extend_from_slice(&id.ino.to_le_bytes());
    match id.mount {
        None => out.extend_from_slice(&[0; 9]),
        Some(MountId::Reusable(m)) => {
            out.push(1);
            out.extend_from_slice(&m.to_le_bytes());
        }
        Some(MountId::Unique(m)) => {
            out.push(2);
            out.extend_from_slice(&m.to_le_bytes());
        }
    }
    match id.btime {
        None => out.extend_from_slice(&[0; 13]),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(&b.sec.to_le_bytes());
            out.extend_from_slice(&b.nsec.to_le_bytes());
        }
    }
}

const STATUSES: [CleanupStatus; 3] = [
    CleanupStatus::Cleaned,
    CleanupStatus::AlreadyGone,
    CleanupStatus::Failed,
];

const CODES: [CleanupCode; 14] = [
    CleanupCode::SymlinkInJob,
    CleanupCode::SpecialFileInJob,
    CleanupCode::MountBoundary,
    CleanupCode::DeviceChanged,
    CleanupCode::IdentityReplaced,
    CleanupCode::UnregisteredEntry,
    CleanupCode::DirectoryNotEmpty,
    CleanupCode::Tampered,
    CleanupCode::JobNotOwned,
    CleanupCode::ProcessBoundExceeded,
    CleanupCode::IoError,
    CleanupCode::Abandoned,
    CleanupCode::Unsupported,
    // Appended: the bytes of earlier codes never change.
    CleanupCode::CgroupNotOwned,
];

fn status_byte(s: CleanupStatus) -> u8 {
    // Statuses added later are journalled as `Failed`: a verdict that is not
    // understood is never read as clean.
    STATUSES.iter().position(|x| *x == s).map_or(2, |p| p as u8)
}

fn code_byte(c: CleanupCode) -> u8 {
    CODES
        .iter()
        .position(|x| *x == c)
        .map_or(u8::MAX, |p| p as u8 + 1)
}

/// A cursor over a verified payload.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u16()?;
        self.take(usize::from(n)).map(<[u8]>::to_vec)
    }
    fn identity(&mut self) -> Option<Identity> {
        let dev = self.u64()?;
        let ino = self.u64()?;
        let mount = match (self.u8()?, self.u64()?) {
            (0, 0) => None,
            (1, m) => Some(MountId::Reusable(m)),
            (2, m) => Some(MountId::Unique(m)),
            _ => return None,
        };
        let tag = self.u8()?;
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        let btime = match (tag, sec, nsec) {
            (0, 0, 0) => None,
            (1, sec, nsec) if nsec < 1_000_000_000 => Some(BirthTime { sec, nsec }),
            _ => return None,
        };
        Some(Identity {
            dev,
            ino,
            mount,
            btime,
        })
    }
}

fn decode_payload(p: &[u8]) -> Option<Record> {
    let mut c = Cur(p);
    let r = match c.u8()? {
        TAG_OPEN => Record::Open {
            request: c.bytes()?,
        },
        TAG_INTENT => {
            let parent = c.u32()?;
            let kind = match c.u8()? {
                0 => ArtifactKind::Dir,
                1 => ArtifactKind::File,
                _ => return None,
            };
            Record::Intent {
                parent,
                kind,
                name: c.bytes()?,
            }
        }
        TAG_CREATED => {
            let index = c.u32()?;
            let identity = c.identity()?;
            if index == JOB_ROOT {
                Record::JobCreated { identity }
            } else {
                Record::Created { index, identity }
            }
        }
        TAG_BARRIER if c.0.len() <= MAX_BARRIER => Record::Barrier {
            record: std::mem::take(&mut c.0).to_vec(),
        },
        TAG_CLEANUP => Record::CleanupStarted,
        TAG_VERDICT => {
            let status = *STATUSES.get(usize::from(c.u8()?))?;
            let code = match c.u8()? {
                0 => None,
                n => Some(*CODES.get(usize::from(n) - 1)?),
            };
            Record::Verdict { status, code }
        }
        _ => return None,
    };
    // A payload with bytes left over is not one `encode` wrote.
    c.0.is_empty().then_some(r)
}

/// Decodes the longest verified prefix of `bytes`. Never panics; never
/// interprets a byte past the first frame it cannot prove.
pub fn read(bytes: &[u8]) -> Read {
    let mut records = Vec::new();
    let mut at = 0;
    let tail = loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            break Tail::Clean;
        }
        if rest[0] != MAGIC {
            break Tail::Corrupt { offset: at };
        }
        if rest.len() < 5 {
            break Tail::Torn { offset: at };
        }
        let len = u32::from_le_bytes(rest[1..5].try_into().expect("4 bytes")) as usize;
        if len == 0 || len > MAX_PAYLOAD {
            break Tail::Corrupt { offset: at };
        }
        let frame = 5 + len + SUM_LEN;
        if rest.len() < frame {
            break Tail::Torn { offset: at };
        }
        if checksum(&rest[..5 + len]) != rest[5 + len..frame] {
            break Tail::Corrupt { offset: at };
        }
        let Some(record) = decode_payload(&rest[5..5 + len]) else {
            break Tail::Corrupt { offset: at };
        };
        records.push(record);
        at += frame;
    };
    Read {
        records,
        valid_len: at,
        tail,
    }
}

/// A journal's records folded into what they prove about one job.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The request id the journal names.
    pub request: Vec<u8>,
    /// The inventory every `Created` record proves (`None` when the job
    /// directory's own creation is not proven).
    pub inventory: Option<Inventory>,
    /// Entries announced by an intent whose identity was never recorded:
    /// they may exist on disk, unproven. Cleanup keeps them (and so the
    /// tree that holds them).
    pub suspect: u32,
    /// The barrier record the journal holds: an input like any journalled
    /// byte, checked by the layer that reads it before it is honoured.
    pub barrier: Option<Vec<u8>>,
    /// Whether cleanup had started.
    pub cleanup_started: bool,
    /// The recorded verdict, if cleanup finished.
    pub verdict: Option<(CleanupStatus, Option<CleanupCode>)>,
    /// Why reading stopped.
    pub tail: Tail,
}

/// Why a verified record sequence cannot be replayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The journal does not start with an `Open` record.
    #[error("journal does not start with an open record")]
    NoOpen,
    /// A record does not follow from the ones before it (an identity without
    /// an intent, an index other than the one registration gives, a second
    /// open, a record after the verdict).
    #[error("journal record {at} is out of sequence")]
    OutOfSequence {
        /// The record's position.
        at: usize,
    },
    /// Registration refused a proven entry.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
}

/// Folds the records of `read` into a [`Replay`].
///
/// # Errors
///
/// [`ReplayError`] when the verified records do not form a sequence the
/// runtime writes; the caller then treats the job as unproven (nothing is
/// removed).
pub fn replay(read: &Read) -> Result<Replay, ReplayError> {
    let mut it = read.records.iter().enumerate();
    let request = match it.next() {
        Some((_, Record::Open { request })) => request.clone(),
        _ => return Err(ReplayError::NoOpen),
    };
    let mut out = Replay {
        request,
        inventory: None,
        suspect: 0,
        barrier: None,
        cleanup_started: false,
        verdict: None,
        tail: read.tail,
    };
    let mut pending: Option<(u32, ArtifactKind, &[u8])> = None;
    for (at, r) in it {
        let bad = ReplayError::OutOfSequence { at };
        if out.verdict.is_some() {
            return Err(bad);
        }
        match r {
            Record::JobCreated { identity } if out.inventory.is_none() => {
                out.inventory = Some(Inventory::new(*identity));
            }
            Record::Intent { parent, kind, name } if out.inventory.is_some() => {
                if out.cleanup_started {
                    return Err(bad);
                }
                // An earlier intent without its identity: its creation
                // failed, or its record was lost. Either way unproven.
                if pending.is_some() {
                    out.suspect += 1;
                }
                pending = Some((*parent, *kind, name));
            }
            Record::Created { index, identity } => {
                let (Some(inv), Some((parent, kind, name))) = (&mut out.inventory, pending.take())
                else {
                    return Err(bad);
                };
                if inv.register(parent, name, kind, *identity)? != *index {
                    return Err(bad);
                }
            }
            Record::Barrier { record }
                if out.inventory.is_some() && out.barrier.is_none() && !out.cleanup_started =>
            {
                out.barrier = Some(record.clone());
            }
            Record::CleanupStarted if !out.cleanup_started => out.cleanup_started = true,
            Record::Verdict { status, code } => out.verdict = Some((*status, *code)),
            _ => return Err(bad),
        }
    }
    if pending.is_some() {
        out.suspect += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(ino: u64) -> Identity {
        Identity {
            dev: 0x0803,
            ino,
            mount: Some(MountId::Unique(0x1_0000_002a)),
            btime: Some(BirthTime {
                sec: 1_764_500_000,
                nsec: 123_456_789,
            }),
        }
    }

    fn sample() -> Vec<Record> {
        vec![
            Record::Open {
                request: b"req-1".to_vec(),
            },
            Record::JobCreated {
                identity: ident(10),
            },
            Record::Intent {
                parent: 0,
                kind: ArtifactKind::Dir,
                name: b"out".to_vec(),
            },
            Record::Created {
                index: 1,
                identity: ident(11),
            },
            Record::Barrier {
                record: b"\x0e\x00custodian-4242\x02\x00r7\x34\x12\0\0\0\0\0\0".to_vec(),
            },
            Record::Intent {
                parent: 1,
                kind: ArtifactKind::File,
                name: b"a.json".to_vec(),
            },
            Record::Created {
                index: 2,
                identity: Identity {
                    dev: 1,
                    ino: 12,
                    mount: Some(MountId::Reusable(7)),
                    btime: None,
                },
            },
            Record::CleanupStarted,
            Record::Verdict {
                status: CleanupStatus::Failed,
                code: Some(CleanupCode::Tampered),
            },
        ]
    }

    fn frames(records: &[Record]) -> (Vec<u8>, Vec<usize>) {
        let mut out = Vec::new();
        let mut ends = Vec::new();
        for r in records {
            encode(r, &mut out);
            ends.push(out.len());
        }
        (out, ends)
    }

    /// A barrier record is whatever follows its tag, up to its bound: the
    /// `Cgroup` record of earlier versions (with or without its id) reads
    /// as the same bytes.
    #[test]
    fn a_barrier_record_is_the_bytes_after_its_tag() {
        let mut payload = vec![TAG_BARRIER];
        put_bytes(&mut payload, b"custodian-9");
        put_bytes(&mut payload, b"r1");
        assert_eq!(
            decode_payload(&payload),
            Some(Record::Barrier {
                record: payload[1..].to_vec()
            })
        );
        let mut long = vec![TAG_BARRIER];
        long.resize(1 + MAX_BARRIER, 7);
        assert!(decode_payload(&long).is_some());
        long.push(7);
        assert_eq!(decode_payload(&long), None);
    }

    #[test]
    fn every_record_round_trips() {
        let records = sample();
        let (bytes, _) = frames(&records);
        let r = read(&bytes);
        assert_eq!(r.tail, Tail::Clean);
        assert_eq!(r.valid_len, bytes.len());
        assert_eq!(r.records, records);
        let rep = replay(&r).expect("a written sequence replays");
        let inv = rep.inventory.expect("job proven");
        assert_eq!(inv.len(), 3);
        assert_eq!(inv.relative_path(2), "out/a.json");
        assert_eq!(rep.suspect, 0);
        assert_eq!(
            rep.barrier.as_deref(),
            Some(&b"\x0e\x00custodian-4242\x02\x00r7\x34\x12\0\0\0\0\0\0"[..])
        );
        assert!(rep.cleanup_started);
        assert_eq!(
            rep.verdict,
            Some((CleanupStatus::Failed, Some(CleanupCode::Tampered)))
        );
    }

    /// Truncated at every byte offset: the reader returns exactly the
    /// complete records before the cut, and says `Torn` inside a frame.
    #[test]
    fn a_cut_at_every_offset_keeps_exactly_the_complete_records() {
        let records = sample();
        let (bytes, ends) = frames(&records);
        for cut in 0..=bytes.len() {
            let r = read(&bytes[..cut]);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(r.records, records[..whole], "cut at {cut}");
            let boundary = if whole == 0 { 0 } else { ends[whole - 1] };
            assert_eq!(r.valid_len, boundary, "cut at {cut}");
            if cut == boundary {
                assert_eq!(r.tail, Tail::Clean, "cut at {cut}");
            } else {
                assert_eq!(r.tail, Tail::Torn { offset: boundary }, "cut at {cut}");
            }
        }
    }

    /// A flipped bit anywhere stops reading at the frame holding it, with
    /// every record before it intact and nothing after it interpreted.
    #[test]
    fn a_flipped_bit_stops_at_its_frame() {
        let records = sample();
        let (bytes, ends) = frames(&records);
        for pos in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[pos] ^= 1 << bit;
                let r = read(&b);
                let frame = ends.iter().position(|&e| e > pos).expect("in a frame");
                let start = if frame == 0 { 0 } else { ends[frame - 1] };
                assert_eq!(r.records, records[..frame], "bit {bit} of byte {pos}");
                assert_eq!(r.valid_len, start);
                // A flip in the length field may announce more than is left.
                assert!(
                    matches!(r.tail, Tail::Corrupt { offset } | Tail::Torn { offset } if offset == start),
                    "bit {bit} of byte {pos}: {:?}",
                    r.tail
                );
                if !(1..5).contains(&(pos - start)) {
                    assert_eq!(r.tail, Tail::Corrupt { offset: start });
                }
            }
        }
    }

    #[test]
    fn an_intent_without_identity_is_suspect() {
        let mut records = sample();
        records.truncate(6); // the file's intent, no identity
        let (bytes, _) = frames(&records);
        let rep = replay(&read(&bytes)).unwrap();
        assert_eq!(rep.suspect, 1);
        assert_eq!(rep.inventory.unwrap().len(), 2);
        assert!(!rep.cleanup_started);
        assert_eq!(rep.verdict, None);
    }

    #[test]
    fn sequences_the_runtime_never_writes_are_refused() {
        let s = sample();
        let cases: Vec<Vec<Record>> = vec![
            vec![s[1].clone()],                                           // no open
            vec![s[0].clone(), s[0].clone()],                             // second open
            vec![s[0].clone(), s[2].clone()],                             // intent before the job
            vec![s[0].clone(), s[1].clone(), s[3].clone()],               // identity without intent
            vec![s[0].clone(), s[1].clone(), s[2].clone(), s[6].clone()], // wrong index
            vec![s[0].clone(), s[1].clone(), s[8].clone(), s[7].clone()], // after verdict
            vec![s[0].clone(), s[4].clone()],                             // barrier before the job
            vec![s[0].clone(), s[1].clone(), s[4].clone(), s[4].clone()], // second barrier
        ];
        for (i, c) in cases.iter().enumerate() {
            let (bytes, _) = frames(c);
            let r = read(&bytes);
            assert_eq!(r.tail, Tail::Clean);
            assert!(replay(&r).is_err(), "case {i}");
        }
    }

    #[test]
    fn foreign_bytes_are_corrupt_not_records() {
        assert_eq!(read(b"hello").tail, Tail::Corrupt { offset: 0 });
        let mut b = vec![MAGIC];
        b.extend_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert_eq!(read(&b).tail, Tail::Corrupt { offset: 0 });
        // A well-checksummed frame with trailing payload bytes.
        let mut b = vec![MAGIC, 2, 0, 0, 0, TAG_CLEANUP, 0];
        let sum = checksum(&b);
        b.extend_from_slice(&sum);
        let r = read(&b);
        assert_eq!(r.tail, Tail::Corrupt { offset: 0 });
        assert!(r.records.is_empty());
    }
}
