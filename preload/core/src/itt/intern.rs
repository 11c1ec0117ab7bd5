//! Interning of ITT domains and string handles: one leaked object per distinct name, found
//! again through lock-free tables (PyTorch creates a string handle per op call, so lookups must
//! be cheap and never take a lock). Objects a static part created before it loaded us are
//! recognised too: names are always read from the object itself.

use core::ffi::{CStr, c_char, c_int};
use core::sync::atomic::{AtomicPtr, Ordering};

use super::abi::{IttDomain, IttStringHandle};
use crate::recorder::stamp::DOMAIN;

/// Marks objects this collector allocated (in `extra1`), which carry their string id.
const OURS: c_int = 0x6d6c_7066;

/// A string handle we allocated: the ITT object first, then what we cache for it.
#[repr(C)]
struct OurHandle {
    itt: IttStringHandle,
    id: u64,
    len: usize,
}

/// A domain we allocated.
#[repr(C)]
struct OurDomain {
    itt: IttDomain,
    id: u64,
    len: usize,
    /// mlprof's own stamping domain: forwarded, never recorded (we recorded the call itself).
    own: bool,
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

/// An object of ours that an intern table holds.
trait Interned {
    /// Whether this object is the one named `bytes` (whose string id is `id`).
    fn is_named(&self, id: u64, bytes: &[u8]) -> bool;
}

impl Interned for OurHandle {
    fn is_named(&self, id: u64, bytes: &[u8]) -> bool {
        self.id == id && self.len == bytes.len() && name_bytes(self.itt.str_a) == bytes
    }
}

impl Interned for OurDomain {
    fn is_named(&self, id: u64, bytes: &[u8]) -> bool {
        self.id == id && self.len == bytes.len() && name_bytes(self.itt.name_a) == bytes
    }
}

/// The object named `bytes` (string id `id`) in `table`, looked for in `probes` slots from the
/// id's own: the one already there, or a fresh `make()` installed in the first empty slot with
/// one compare-and-swap. `None` when every probed slot holds another name.
fn intern<T: Interned>(
    table: &[AtomicPtr<T>],
    probes: usize,
    id: u64,
    bytes: &[u8],
    make: impl Fn() -> T,
) -> Option<*mut T> {
    let start = id as usize % table.len();
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
        let object = unsafe { &*current };
        if object.is_named(id, bytes) {
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

fn new_handle(id: u64, bytes: &[u8]) -> OurHandle {
    OurHandle {
        itt: IttStringHandle {
            str_a: leak_c_string(bytes),
            str_w: core::ptr::null(),
            extra1: OURS,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        },
        id,
        len: bytes.len(),
    }
}

/// The string handle for `name`, created once per distinct name.
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn string_handle(name: *const c_char) -> *mut IttStringHandle {
    let bytes = name_bytes(name);
    let id = mlprof_format::string_id(bytes);
    let handle = intern(&HANDLES, HANDLE_PROBES, id, bytes, || new_handle(id, bytes))
        // A crowded neighbourhood: a fresh, uninterned handle is still correct.
        .unwrap_or_else(|| Box::into_raw(Box::new(new_handle(id, bytes))));
    handle as *mut IttStringHandle
}

/// The domain named `name`, created once; null when the table is full.
///
/// # Safety
/// Pointer arguments are null or what an ITT static part passes: objects made by a
/// `__itt_*_create` (ours or its own) and NUL-terminated names, alive for the process's life.
pub unsafe fn domain(name: *const c_char) -> *mut IttDomain {
    let bytes = name_bytes(name);
    let id = mlprof_format::string_id(bytes);
    let make = || OurDomain {
        itt: IttDomain {
            flags: 1,
            name_a: leak_c_string(bytes),
            name_w: core::ptr::null(),
            extra1: OURS,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        },
        id,
        len: bytes.len(),
        own: bytes == DOMAIN.to_bytes(),
    };
    intern(&DOMAINS, DOMAIN_SLOTS, id, bytes, make).map_or(core::ptr::null_mut(), |d| d as *mut IttDomain)
}

/// (string id, name bytes, is it our own stamping domain) of any domain pointer.
pub(super) fn domain_identity<'a>(domain: *const IttDomain) -> (u64, &'a [u8], bool) {
    // Safety: ITT callers pass domains created by a domain_create (ours or a static part's).
    let Some(d) = (unsafe { domain.as_ref() }) else { return (0, b"", false) };
    if d.extra1 == OURS {
        // Safety: extra1 == OURS marks an OurDomain we allocated.
        let ours = unsafe { &*(domain as *const OurDomain) };
        return (ours.id, our_name(d.name_a, ours.len), ours.own);
    }
    // A domain the static part created before it loaded us: ours is recognised by its name.
    let bytes = name_bytes(d.name_a);
    (mlprof_format::string_id(bytes), bytes, bytes == DOMAIN.to_bytes())
}

pub(super) fn handle_identity<'a>(handle: *const IttStringHandle) -> (u64, &'a [u8]) {
    // Safety: as in `domain_identity`.
    let Some(h) = (unsafe { handle.as_ref() }) else { return (0, b"") };
    if h.extra1 == OURS {
        // Safety: extra1 == OURS marks an OurHandle we allocated.
        let ours = unsafe { &*(handle as *const OurHandle) };
        return (ours.id, our_name(h.str_a, ours.len));
    }
    let bytes = name_bytes(h.str_a);
    (mlprof_format::string_id(bytes), bytes)
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
    fn a_crowded_table_still_gives_a_correct_handle() {
        // More names than one neighbourhood holds, all hashing anywhere: each lookup returns a
        // handle carrying its own name, interned or not.
        for i in 0..5000 {
            let name = std::ffi::CString::new(format!("unit::op{i}")).unwrap();
            // Safety: a NUL-terminated string.
            let handle = unsafe { string_handle(name.as_ptr()) };
            let (id, bytes) = handle_identity(handle);
            assert_eq!(bytes, name.to_bytes());
            assert_eq!(id, mlprof_format::string_id(name.to_bytes()));
        }
    }

    #[test]
    fn objects_made_by_a_static_part_are_named_from_their_own_fields() {
        // What a static part allocates before it loaded any collector (PyTorch's "PyTorch"
        // domain at import): not ours, so identified by reading the name.
        let theirs = IttDomain {
            flags: 1,
            name_a: c"mlprof".as_ptr(),
            name_w: core::ptr::null(),
            extra1: 0,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        };
        let (id, bytes, own) = domain_identity(&theirs);
        assert_eq!((id, bytes, own), (mlprof_format::string_id(b"mlprof"), &b"mlprof"[..], true));
        let handle = IttStringHandle {
            str_a: c"aten::conv2d".as_ptr(),
            str_w: core::ptr::null(),
            extra1: 0,
            extra2: AtomicPtr::new(core::ptr::null_mut()),
            next: core::ptr::null_mut(),
        };
        assert_eq!(handle_identity(&handle).1, b"aten::conv2d");
        assert_eq!(domain_identity(core::ptr::null()), (0, &b""[..], false));
    }
}
