//! Call sites (since format 1.6; `mlprof-collect --sites`): which Python line, or which native
//! caller, made each recorded call.
//!
//! **In the ring.** A process numbers its sites itself (1, 2, …; 0: none) and defines each once,
//! on the lane of the thread that met it first, before that thread's first record that uses
//! it (another thread's lane may deliver a record that uses it earlier: the consumer holds
//! such a record until the definition comes), with a [`KIND_SITE_DEF`] control record: `fd` = the
//! number, `arg` = file string id, `arg2` = function string id (both sent before, as
//! [`crate::record::KIND_STRING_DEF`]s), `extra` = line, `start` = the number of the site
//! whose function called this one's (`--sites=N`; 0: none), `flags` [`SITE_NATIVE`] for a
//! native caller (then `ret` = its return address less its module's load bias, the same in
//! every process that maps the module; file = the module's path; function 0: the reports name
//! it from the module's symbol table). A record made at a site is flagged [`FLAG_SITE`] and
//! carries the number in its `pid` slot, which the collector overwrites with the lane owner's
//! pid anyway. A fork child numbers its
//! own sites again.
//!
//! **In the run file.** [`SiteInfo`] frames ([`FRAME_SITE`]) give each site a run-wide id:
//! the same (file, function, line) met in several processes — DataLoader workers running the
//! same line — is one site. A [`FRAME_EVENT_SITES`] frame right after an events frame holds one
//! little-endian `u32` site id per event of that frame (0: none), and is written only when one
//! of them has a site. Older readers skip both kinds and see the events as before.

use serde::{Deserialize, Serialize};

/// Ring control kind: defines a site of the process (see the module).
pub const KIND_SITE_DEF: u16 = 0x8007;

/// `Event::flags` bit of a ring record: its `pid` slot holds the number of the process's site
/// that made the call. The collector clears it: in the run file the site is in
/// [`FRAME_EVENT_SITES`].
pub const FLAG_SITE: u16 = 8;

/// [`KIND_SITE_DEF`] `flags` bit: a native caller, not a Python line.
pub const SITE_NATIVE: u16 = 1;

/// Run-file frame kind: a [`SiteInfo`] (since 1.6).
pub const FRAME_SITE: u16 = 23;

/// Run-file frame kind: the site id of each event of the events frame just before it, `u32`
/// LE each (since 1.6).
pub const FRAME_EVENT_SITES: u16 = 24;

/// One call site of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SiteInfo {
    /// The run-wide id events refer to (never 0).
    pub id: u32,
    /// String id of the file: the path as the code object names it, or the native module.
    pub file: u64,
    /// String id of the function: the code object's qualified name (0 for a native caller:
    /// the reports name it from the module's symbol table).
    pub function: u64,
    /// The line (1-based; 0: unknown, and always for native callers).
    pub line: u32,
    /// A native caller rather than a Python line.
    pub native: bool,
    /// A native caller's return address less its module's load bias: the module's own
    /// address, as in its ELF file (0 for Python).
    pub address: u64,
    /// The run-wide id of the site whose function called this one's (`--sites=N`: the next
    /// frame out; 0: none recorded).
    pub parent: u32,
}

/// The [`FRAME_EVENT_SITES`] payload for `sites`.
pub fn encode_event_sites(sites: &[u32]) -> Vec<u8> {
    sites.iter().flat_map(|id| id.to_le_bytes()).collect()
}

/// The site ids of a [`FRAME_EVENT_SITES`] payload of `events` events, or why it is corrupt
/// (it must hold exactly one id per event).
pub fn decode_event_sites(payload: &[u8], events: usize) -> Result<Vec<u32>, String> {
    if payload.len() != events * 4 {
        return Err(format!("{} bytes of event sites for {events} events", payload.len()));
    }
    Ok(payload.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_sites_round_trip_and_a_wrong_count_is_corrupt() {
        let sites = [0, 7, 0, 1 << 31];
        let payload = encode_event_sites(&sites);
        assert_eq!(payload.len(), 16);
        assert_eq!(decode_event_sites(&payload, 4).unwrap(), sites);
        assert!(decode_event_sites(&payload, 3).is_err());
        assert!(decode_event_sites(&payload, 5).is_err());
    }
}
