//! Interning of ITT domains and string handles: one leaked object per distinct name, found
//! again through lock-free tables (PyTorch creates a string handle per op call, so lookups must
//! be cheap and never take a lock). Objects a static part created before it loaded us are
//! recognised too: names are always read from the object itself.
//!
//! The tables are keyed by a word-at-a-time hash of the name (`rustc-hash`'s), not by the
//! name's string id: the id (FNV-1a, the run file's) takes a multiply per byte in one chain,
//! ~15 ns for an op name, and is computed once per object instead.

use core::ffi::{CStr, c_char, c_int};
use core::hash::Hasher;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use super::abi::{IttDomain, IttStringHandle};
use crate::recorder::stamp::DOMAIN;
use crate::recorder::{session, strings};

/// Marks objects this collector allocated (in `extra1`), which carry their string id.
const OURS: c_int = 0x6d6c_7066;

/// A string handle we allocated: the ITT object first, then what we cache for it.
#[repr(C)]
struct OurHandle {
    itt: IttStringHandle,
    name: OurName,
}

/// A domain we allocated.
#[repr(C)]
struct OurDomain {
    itt: IttDomain,
    name: OurName,
    /// mlprof's own stamping domain: forwarded, never recorded (we recorded the call itself).
    own: bool,
}

/// What an object of ours knows about its name.
struct OurName {
    /// The string id records carry.
    id: u64,
    /// The intern tables' key.
    key: u64,
    len: usize,
    /// The epoch in which this process last found the name sent to its collector (0: not
    /// known): one load instead of a probe of the set of sent strings at every task.
    sent_in: AtomicU32,
}

impl OurName {
    fn new(key: u64, bytes: &[u8]) -> OurName {
        OurName { id: mlprof_format::string_id(bytes), key, len: bytes.len(), sent_in: AtomicU32::new(0) }
    }

    /// Whether this is the name `bytes` (lookup key `key`); `text`: the object's copy of it.
    #[inline(always)]
    fn is(&self, text: *const c_char, key: u64, bytes: &[u8]) -> bool {
        self.key == key && same_name(our_name(text, self.len), bytes)
    }
}

/// The intern tables' key of a name.
fn lookup_key(bytes: &[u8]) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

/// Who a domain or a string handle names, as a task records it.
pub(super) struct Identity<'a> {
    /// The string id (0: no name).
    pub id: u64,
    pub bytes: &'a [u8],
    /// Our object's memory of having sent it (`None`: a static part's object).
    sent_in: Option<&'a AtomicU32>,
}

impl Identity<'_> {
    const NONE: Identity<'static> = Identity { id: 0, bytes: b"", sent_in: None };

    /// Whether the name needs no sending: none, or this process sent it to the current
    /// collector (as `strings::was_sent` says, remembered in our object for next time).
    #[inline(always)]
    pub fn was_sent(&self) -> bool {
        if self.id == 0 {
            return true;
        }
        let epoch = session::epoch();
        match self.sent_in {
            Some(sent_in) if epoch != 0 && sent_in.load(Ordering::Relaxed) == epoch => true,
            _ => self.look_up_sent(epoch),
        }
    }

    /// The set of strings sent, for a name not known to be sent in `epoch`.
    #[cold]
    fn look_up_sent(&self, epoch: u32) -> bool {
        let sent = strings::was_sent(self.id);
        if sent && let Some(sent_in) = self.sent_in {
            sent_in.store(epoch, Ordering::Relaxed);
        }
        sent
    }
}

/// What we learnt of a domain or string handle a static part made before it loaded us (PyTorch
/// creates its domain at load time, and every op span names it): found again by the object's
/// address and its name's, so that its name is neither measured nor hashed at every task.
/// Those never change: a static part frees its objects only when it is unloaded, and an object
/// that a later one made at the same place, with its name at the same place too, is the one
/// case that would be shown with the earlier name.
#[repr(C)]
struct Foreign {
    object: usize,
    /// The object's name pointer.
    theirs: *const c_char,
    /// Our copy of the name.
    text: *const c_char,
    name: OurName,
}

const FOREIGN_SLOTS: usize = 1024;
const FOREIGN_PROBES: usize = 16;
static FOREIGN: [AtomicPtr<Foreign>; FOREIGN_SLOTS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; FOREIGN_SLOTS];

/// The identity of a static part's object at `object` named `text`.
fn foreign_identity<'a>(object: usize, text: *const c_char) -> Identity<'a> {
    // Objects are heap blocks aligned to 16: the multiply spreads their addresses over the slots.
    let key = (object as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
    let is_it = |known: &Foreign| known.object == object && known.theirs == text;
    match intern(&FOREIGN, FOREIGN_PROBES, key, is_it, || learn_foreign(object, text, key)) {
        Some(known) => {
            // Safety: slots only ever hold leaked, never-freed objects.
            let known = unsafe { &*known };
            known.name.identity(known.text)
        }
        // Every probed slot holds another object: its name as it is, not remembered.
        None => {
            let bytes = name_bytes(text);
            Identity { id: mlprof_format::string_id(bytes), bytes, sent_in: None }
        }
    }
}

/// The first sight of a static part's object (out of line: the lookup that precedes it is
/// made at every task).
#[cold]
#[inline(never)]
fn learn_foreign(object: usize, text: *const c_char, key: u64) -> Foreign {
    let bytes = name_bytes(text);
    Foreign { object, theirs: text, text: leak_c_string(bytes), name: OurName::new(key, bytes) }
}

const HANDLE_SLOTS: usize = 1 << 16;
const DOMAIN_SLOTS: usize = 256;
/// Slots looked at for a handle before giving up on interning it.
const HANDLE_PROBES: usize = 64;

/// Content hash → leaked object. Slots only ever go from null to an object that is never freed.
static HANDLES: [AtomicPtr<OurHandle>; HANDLE_SLOTS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; HANDLE_SLOTS];
static DOMAINS: [AtomicPtr<OurDomain>; DOMAIN_SLOTS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; DOMAIN_SLOTS];

/// The object `is_it` recognises in `table`, looked for in `probes` slots from `key`'s own: the
/// one already there, or a fresh `make()` installed in the first empty slot with one
/// compare-and-swap. `None` when every probed slot holds another object.
fn intern<T>(
    table: &[AtomicPtr<T>],
    probes: usize,
    key: u64,
    is_it: impl Fn(&T) -> bool,
    make: impl Fn() -> T,
) -> Option<*mut T> {
    let start = key as usize % table.len();
    for probe in 0..probes.min(table.len()) {
        let slot = table.get((start + probe) % table.len())?;
        let mut current = slot.load(Ordering::Acquire);
        if current.is_null() {
            let fresh = Box::into_raw(Box::new(make()));
            match slot.compare_exchange(core::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(fresh),
                Err(winner) => {
                    // Another thread filled the slot first; ours was never shared.
                    // Safety: `fresh` came from Box::into_raw above and nobody else saw it.
                    drop(unsafe { Box::from_raw(fresh) });
                    current = winner;
                }
            }
        }
        // Safety: slots only ever hold leaked, never-freed objects.
        if is_it(unsafe { &*current }) {
            return Some(current);
        }
    }
    None
}

fn leak_c_string(bytes: &[u8]) -> *const c_char {
    let mut owned = Vec::with_capacity(bytes.len() + 1);
    owned.extend_from_slice(bytes);
    owned.push(0);
    owned.leak().as_ptr() as *const c_char
}

/// The bytes of a NUL-terminated ITT name (empty for null).
pub(super) fn name_bytes<'a>(name: *const c_char) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // Safety: ITT names are NUL-terminated strings that live as long as their objects.
    unsafe { CStr::from_ptr(name) }.to_bytes()
}

/// The name of an object of ours, whose length we stored: PyTorch's op spans look a handle up
/// twice per op, and a `strlen` of each name was a measurable part of the span's cost.
fn our_name<'a>(name: *const c_char, len: usize) -> &'a [u8] {
    if name.is_null() {
        return b"";
    }
    // Safety: `name` is a leaked copy of exactly `len` bytes (plus a NUL) that we made in
    // `leak_c_string`, never freed nor written again.
    unsafe { core::slice::from_raw_parts(name as *const u8, len) }
}

/// Whether two names are the same bytes. Op and range names are mostly under 17 bytes, which
/// two overlapping word loads per side compare without a call to `bcmp` (a tenth of an ITT
/// range's cost went to that call and its set-up).
#[inline(always)]
fn same_name(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let words = |bytes: &[u8]| match (bytes.first_chunk::<8>(), bytes.last_chunk::<8>()) {
        (Some(first), Some(last)) => Some((u64::from_ne_bytes(*first), u64::from_ne_bytes(*last))),
        _ => None,
    };
    if a.len() <= 16
        && let (Some(x), Some(y)) = (words(a), words(b))
    {
        return x == y;
    }
    a == b
}

fn new_handle(key: u64, bytes: &[u8]) -> OurHandle {
    OurHandle {
        itt: IttStringHandle {
            str_a: leak_c_string(bytes),
            str_w: core::ptr::null(),
            extra1: OURS,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        },
        name: OurName::new(key, bytes),
    }
}

/// The string handle for `name`, created once per distinct name.
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn string_handle(name: *const c_char) -> *mut IttStringHandle {
    let bytes = name_bytes(name);
    let key = lookup_key(bytes);
    let is_it = |h: &OurHandle| h.name.is(h.itt.str_a, key, bytes);
    let handle = intern(&HANDLES, HANDLE_PROBES, key, is_it, || new_handle(key, bytes))
        // A crowded neighbourhood: a fresh, uninterned handle is still correct.
        .unwrap_or_else(|| Box::into_raw(Box::new(new_handle(key, bytes))));
    handle as *mut IttStringHandle
}

/// The domain named `name`, created once; null when the table is full.
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn domain(name: *const c_char) -> *mut IttDomain {
    let bytes = name_bytes(name);
    let key = lookup_key(bytes);
    let make = || OurDomain {
        itt: IttDomain {
            flags: 1,
            name_a: leak_c_string(bytes),
            name_w: core::ptr::null(),
            extra1: OURS,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        },
        name: OurName::new(key, bytes),
        own: bytes == DOMAIN.to_bytes(),
    };
    let is_it = |d: &OurDomain| d.name.is(d.itt.name_a, key, bytes);
    intern(&DOMAINS, DOMAIN_SLOTS, key, is_it, make).map_or(core::ptr::null_mut(), |d| d as *mut IttDomain)
}

/// Who any domain pointer names, and whether it is our own stamping domain.
pub(super) fn domain_identity<'a>(domain: *const IttDomain) -> (Identity<'a>, bool) {
    // Safety: ITT callers pass domains created by a domain_create (ours or a static part's).
    let Some(d) = (unsafe { domain.as_ref() }) else { return (Identity::NONE, false) };
    if d.extra1 == OURS {
        // Safety: extra1 == OURS marks an OurDomain we allocated, never freed.
        let ours = unsafe { &*(domain as *const OurDomain) };
        return (ours.name.identity(d.name_a), ours.own);
    }
    // A domain the static part created before it loaded us: ours is recognised by its name.
    let identity = foreign_identity(domain as usize, d.name_a);
    let own = identity.bytes == DOMAIN.to_bytes();
    (identity, own)
}

/// Who any string handle pointer names.
pub(super) fn handle_identity<'a>(handle: *const IttStringHandle) -> Identity<'a> {
    // Safety: as in `domain_identity`.
    let Some(h) = (unsafe { handle.as_ref() }) else { return Identity::NONE };
    if h.extra1 == OURS {
        // Safety: extra1 == OURS marks an OurHandle we allocated, never freed.
        let ours = unsafe { &*(handle as *const OurHandle) };
        return ours.name.identity(h.str_a);
    }
    foreign_identity(handle as usize, h.str_a)
}

impl OurName {
    /// The identity of the object whose name this is (`text`: its leaked copy of the name).
    fn identity<'a>(&'a self, text: *const c_char) -> Identity<'a> {
        Identity { id: self.id, bytes: our_name(text, self.len), sent_in: Some(&self.sent_in) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_object_per_name() {
        // Safety: NUL-terminated literals.
        unsafe {
            let a = string_handle(c"aten::mm".as_ptr());
            assert_eq!(string_handle(c"aten::mm".as_ptr()), a);
            assert_ne!(string_handle(c"aten::add".as_ptr()), a);
            assert_eq!(name_bytes((*a).str_a), b"aten::mm");
            let d = domain(c"unit.intern".as_ptr());
            assert_eq!(domain(c"unit.intern".as_ptr()), d);
            assert_ne!((*d).flags, 0, "a zero flags field makes static parts skip the domain");
        }
    }

    #[test]
    fn names_compare_by_every_byte_at_every_length() {
        let base: Vec<u8> = (b'a'..=b'z').chain(b'A'..=b'Z').collect();
        for len in 0..base.len() {
            let a = &base[..len];
            let copy = a.to_vec();
            assert!(same_name(a, &copy), "a copy elsewhere in memory is the same name");
            assert!(!same_name(a, &base[..len + 1]), "a prefix is another name");
            for at in 0..len {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_name(a, &b), "length {len}, byte {at} differs");
            }
        }
    }

    #[test]
    fn a_crowded_table_still_gives_a_correct_handle() {
        // More names than one neighbourhood holds, all hashing anywhere: each lookup returns a
        // handle carrying its own name, interned or not.
        for i in 0..5000 {
            let name = std::ffi::CString::new(format!("unit::op{i}")).unwrap();
            // Safety: a NUL-terminated string.
            let handle = unsafe { string_handle(name.as_ptr()) };
            let identity = handle_identity(handle);
            assert_eq!(identity.bytes, name.to_bytes());
            assert_eq!(identity.id, mlprof_format::string_id(name.to_bytes()));
        }
    }

    #[test]
    fn objects_made_by_a_static_part_are_named_from_their_own_fields() {
        // What a static part allocates before it loaded any collector (PyTorch's "PyTorch"
        // domain at import): not ours, so identified by reading the name.
        let mut theirs = IttDomain {
            flags: 1,
            name_a: c"mlprof".as_ptr(),
            name_w: core::ptr::null(),
            extra1: 0,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        };
        let (identity, own) = domain_identity(&theirs);
        assert_eq!(
            (identity.id, identity.bytes, own),
            (mlprof_format::string_id(b"mlprof"), &b"mlprof"[..], true)
        );
        assert!(identity.sent_in.is_some(), "remembered by its address");
        assert_eq!(
            domain_identity(&theirs).0.sent_in.map(|s| s as *const _),
            identity.sent_in.map(|s| s as *const _)
        );
        // The same address with another name (a static part's memory freed and reused): the
        // name read from the object counts, never the one remembered.
        theirs.name_a = c"unit.reused".as_ptr();
        let (again, own) = domain_identity(&theirs);
        assert_eq!(
            (again.id, again.bytes, own),
            (mlprof_format::string_id(b"unit.reused"), &b"unit.reused"[..], false)
        );
        let handle = IttStringHandle {
            str_a: c"aten::conv2d".as_ptr(),
            str_w: core::ptr::null(),
            extra1: 0,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        };
        assert_eq!(handle_identity(&handle).bytes, b"aten::conv2d");
        let (none, own) = domain_identity(core::ptr::null());
        assert_eq!((none.id, none.bytes, own), (0, &b""[..], false));
        assert!(none.was_sent(), "no name: nothing to send");
    }
}
