//! Names native code: the function of an ELF module that holds a given address, from the
//! module's symbol tables (`.symtab`, else `.dynsym`), demangled (C++ and Rust).
//!
//! Addresses are the module's own (ELF virtual addresses: a runtime address less the module's
//! load bias), so one name serves every process that mapped the module. Modules are read when
//! first asked for and kept; a module that cannot be read (gone, not ELF, no symbols) names
//! nothing, and is not read again.
//!
//! Used by the reports for call sites' native callers (`--sites`) and sampled stacks
//! (`--sample`, whose addresses are offsets in the module's file).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing))]

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use object::read::ReadCache;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// Functions of modules, by path.
#[derive(Default)]
pub struct Symbolizer {
    modules: HashMap<PathBuf, Option<Functions>>,
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    /// The demangled name of the function of `module` that holds `address` (the module's own
    /// address), or `None` when the module cannot be read or no function holds the address.
    pub fn function(&mut self, module: &Path, address: u64) -> Option<&str> {
        let functions = self.modules.entry(module.to_path_buf()).or_insert_with(|| Functions::read(module));
        functions.as_ref()?.at(address)
    }

    /// Like [`Symbolizer::function`], for an offset in the module's file (what a sampled
    /// address is, whatever the address the module was loaded at): the loadable segment that
    /// holds the offset turns it into the module's own address.
    pub fn function_at_offset(&mut self, module: &Path, offset: u64) -> Option<&str> {
        let functions = self.modules.entry(module.to_path_buf()).or_insert_with(|| Functions::read(module));
        let functions = functions.as_ref()?;
        functions.at(functions.address_of_offset(offset)?)
    }

    /// Whether `module` could be read and has symbols (after a [`Symbolizer::function`] asked
    /// for it).
    pub fn has_symbols(&self, module: &Path) -> bool {
        self.modules.get(module).is_some_and(Option::is_some)
    }
}

/// A module's functions, sorted by start address, and where its file is loaded.
struct Functions {
    /// (start, size, name); size 0 where the table gives none.
    sorted: Vec<(u64, u64, String)>,
    /// Loadable segments: (file offset, bytes in the file, address).
    segments: Vec<(u64, u64, u64)>,
}

impl Functions {
    fn read(path: &Path) -> Option<Functions> {
        let file = File::open(path).ok()?;
        let cache = ReadCache::new(file);
        let object = object::File::parse(&cache).ok()?;
        let mut sorted = collect(object.symbols());
        if sorted.is_empty() {
            sorted = collect(object.dynamic_symbols());
        }
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by_key(|(start, ..)| *start);
        let segments = object
            .segments()
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (offset, size, segment.address())
            })
            .collect();
        Some(Functions { sorted, segments })
    }

    /// The address of file offset `offset` once loaded (`None`: no loadable segment holds it).
    fn address_of_offset(&self, offset: u64) -> Option<u64> {
        let (start, _, address) = self
            .segments
            .iter()
            .find(|(start, size, _)| (*start..start.saturating_add(*size)).contains(&offset))?;
        Some(address + (offset - start))
    }

    fn at(&self, address: u64) -> Option<&str> {
        let after = self.sorted.partition_point(|(start, ..)| *start <= address);
        let (start, size, name) = self.sorted.get(after.checked_sub(1)?)?;
        // A sized symbol must hold the address; an unsized one holds up to the next symbol.
        (*size == 0 || address < start.saturating_add(*size)).then_some(name.as_str())
    }
}

fn collect<'data, S: ObjectSymbol<'data>>(symbols: impl Iterator<Item = S>) -> Vec<(u64, u64, String)> {
    symbols
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), demangle(s.name().ok()?))))
        .collect()
}

/// A C++ or Rust symbol demangled for display (Rust's without its hash); other names as they
/// are.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z")
        && let Ok(symbol) = cpp_demangle::Symbol::new(name)
        && let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default())
    {
        return text;
    }
    name.to_string()
}

#[cfg(test)]
mod tests;
