//! The files code is mapped from, loaded once each: the file mapped read-only, the sections
//! framehop unwinds with, the build id, and the segments that place a mapping's addresses.
//! Cached by (path, inode), so a library mapped by a hundred DataLoader workers is read once.

use std::ops::{Deref, Range};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};
use rustc_hash::FxHashMap;

/// A whole file mapped read-only and private; pages are read from the page cache on demand,
/// so a 1 GiB libtorch costs only the unwind tables a sample touches.
pub(crate) struct MappedFile {
    base: *const u8,
    len: usize,
}

// Safety: a read-only mapping nobody writes through; shared immutably between threads.
unsafe impl Send for MappedFile {}
// Safety: as above, only ever read.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    fn open(path: &std::path::Path) -> std::io::Result<(MappedFile, std::fs::Metadata)> {
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        let len = usize::try_from(meta.len()).unwrap_or(0);
        if len == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidData));
        }
        // Safety: a new private read-only mapping of a file we just opened; the descriptor
        // may close afterwards. A file truncated under us would fault on access: libraries
        // are replaced by rename, not rewritten in place, so we accept that.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0)
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok((MappedFile { base: base.cast(), len }, meta))
    }

    fn bytes(&self) -> &[u8] {
        // Safety: `base..base+len` is our live read-only mapping.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // Safety: the mapping made in `open`; no slice of it outlives the last `Arc`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// A section's bytes inside a mapped file: what framehop keeps per module.
#[derive(Clone)]
pub(crate) struct FileBytes {
    file: Arc<MappedFile>,
    range: Range<usize>,
}

impl Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.file.bytes()[self.range.clone()]
    }
}

/// A loadable segment: where its file bytes go in the object's address space.
#[derive(Clone, Copy, Debug)]
struct Segment {
    offset: u64,
    size: u64,
    vaddr: u64,
    executable: bool,
}

/// What the unwinder needs of one section: its address in the object and its bytes.
#[derive(Clone)]
struct Section {
    svma: Range<u64>,
    bytes: Option<Range<usize>>,
}

/// One loaded ELF file.
pub(crate) struct ModuleFile {
    file: Arc<MappedFile>,
    sections: Vec<(&'static [u8], Section)>,
    segments: Vec<Segment>,
    pub(crate) build_id: Option<Vec<u8>>,
}

/// The sections framehop asks for on ELF (`ModuleUnwindDataInternal::new`, base addresses).
const SECTIONS: [&[u8]; 5] = [b".text", b".eh_frame", b".eh_frame_hdr", b".debug_frame", b".got"];

impl ModuleFile {
    fn load(path: &std::path::Path, inode: u64) -> Option<ModuleFile> {
        let (file, meta) = MappedFile::open(path).ok()?;
        if inode != 0 && meta.ino() != inode {
            return None; // replaced since it was mapped: its tables would lie
        }
        let file = Arc::new(file);
        let object = object::File::parse(file.bytes()).ok()?;
        let sections = SECTIONS
            .iter()
            .filter_map(|name| {
                let section = object.section_by_name_bytes(name)?;
                let compressed = section.compressed_file_range().ok()?;
                let bytes = (compressed.format == object::CompressionFormat::None)
                    .then(|| section.file_range())
                    .flatten()
                    .map(|(offset, size)| offset as usize..(offset + size) as usize);
                let svma = section.address()..section.address() + section.size();
                Some((*name, Section { svma, bytes }))
            })
            .collect();
        let segments = object
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                let executable = matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0);
                Segment { offset, size, vaddr: s.address(), executable }
            })
            .collect();
        let build_id = object.build_id().ok().flatten().map(<[u8]>::to_vec);
        drop(object);
        Some(ModuleFile { file, sections, segments, build_id })
    }

    /// The load bias of a mapping of this file at `start` from file offset `pgoff`: the address
    /// where the object's address 0 lies. The segment mapped is the one whose file bytes the
    /// mapping covers (an executable one first): a file offset `x` of it lies at
    /// `x - offset + vaddr + bias`, and `pgoff` lies at `start`.
    pub(crate) fn bias(&self, start: u64, pgoff: u64, len: u64) -> Option<u64> {
        let covered = |s: &&Segment| s.offset < pgoff + len && pgoff < s.offset + s.size.max(1);
        let segment = self
            .segments
            .iter()
            .filter(covered)
            .find(|s| s.executable)
            .or_else(|| self.segments.iter().find(covered))?;
        Some(start.wrapping_sub(pgoff).wrapping_add(segment.offset).wrapping_sub(segment.vaddr))
    }

    /// The section information framehop builds a module from.
    /// The (address, size) of each symbol named, from the dynamic symbol table and, where
    /// the file keeps one, the full one (ELF addresses: add the load bias). For the few files
    /// whose symbols the sampler needs (the Python interpreter), so parsed again on demand.
    pub(crate) fn symbols(&self, names: &[&str]) -> Vec<Option<(u64, u64)>> {
        use object::ObjectSymbol;
        let mut found = vec![None; names.len()];
        let Ok(object) = object::File::parse(self.file.bytes()) else { return found };
        for symbol in object.dynamic_symbols().chain(object.symbols()) {
            let Ok(name) = symbol.name() else { continue };
            if let Some(at) = names.iter().position(|n| *n == name)
                && let Some(slot) = found.get_mut(at)
                && slot.is_none()
                && symbol.address() != 0
            {
                *slot = Some((symbol.address(), symbol.size()));
            }
        }
        found
    }

    pub(crate) fn section_info(self: &Arc<Self>) -> SectionInfo {
        SectionInfo { module: Arc::clone(self) }
    }
}

/// framehop's view of a [`ModuleFile`] (`ModuleSectionInfo`): ELF's base address is 0.
pub(crate) struct SectionInfo {
    module: Arc<ModuleFile>,
}

impl SectionInfo {
    fn section(&self, name: &[u8]) -> Option<&Section> {
        self.module.sections.iter().find(|(n, _)| *n == name).map(|(_, s)| s)
    }
}

impl framehop::ModuleSectionInfo<FileBytes> for SectionInfo {
    fn base_svma(&self) -> u64 {
        0
    }

    fn section_svma_range(&mut self, name: &[u8]) -> Option<Range<u64>> {
        self.section(name).map(|s| s.svma.clone())
    }

    fn section_data(&mut self, name: &[u8]) -> Option<FileBytes> {
        let range = self.section(name)?.bytes.clone()?;
        (range.end <= self.module.file.len).then(|| FileBytes { file: Arc::clone(&self.module.file), range })
    }
}

/// Every file loaded so far, by (path, inode); a file that could not be loaded is remembered
/// too, so that each mapping of it does not try again.
#[derive(Default)]
pub(crate) struct ModuleCache {
    files: FxHashMap<(Vec<u8>, u64), Option<Arc<ModuleFile>>>,
}

impl ModuleCache {
    /// The file mapped from `path` (inode `inode`, 0 when unknown), loaded on first use.
    /// `None` for what is not a readable ELF file: `[vdso]`, anonymous JIT code, a deleted or
    /// replaced file.
    pub(crate) fn get(&mut self, path: &[u8], inode: u64) -> Option<Arc<ModuleFile>> {
        if !path.starts_with(b"/") {
            return None;
        }
        let key = (path.to_vec(), inode);
        if let Some(known) = self.files.get(&key) {
            return known.clone();
        }
        use std::os::unix::ffi::OsStrExt;
        let loaded =
            ModuleFile::load(std::path::Path::new(std::ffi::OsStr::from_bytes(path)), inode).map(Arc::new);
        self.files.insert(key, loaded.clone());
        loaded
    }

    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }
}
