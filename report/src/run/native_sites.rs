//! Names the native callers among a run's call sites (`--sites` on threads that run no Python):
//! the run file has each one's module and its address in the module; the function comes from
//! the module's symbol table ([`mlprof_symbols`]), read here, at report time, on the machine the
//! report runs on. Sites of one function (calls from several places in it) are folded into one,
//! which is what the reports show: "module + function".
//!
//! A module that cannot be read, or an address no symbol holds, keeps its address as its name
//! (`0x1a2b`), so that nothing is lost and the site still shows.

use std::collections::HashMap;
use std::path::Path;

use mlprof_format::site::SiteInfo;
use mlprof_symbols::Symbolizer;

/// Names `sites`' native callers, adding the names to `strings`; returns the folded sites:
/// site id → the id of the first site of the same module, function and caller.
pub(crate) fn name(
    sites: &mut HashMap<u32, SiteInfo>,
    strings: &mut HashMap<u64, String>,
) -> HashMap<u32, u32> {
    let mut symbolizer = Symbolizer::new();
    let mut ids: Vec<u32> =
        sites.iter().filter(|(_, s)| s.native && s.function == 0).map(|(&id, _)| id).collect();
    if ids.is_empty() {
        return HashMap::new();
    }
    ids.sort_unstable();
    for &id in &ids {
        let Some(site) = sites.get_mut(&id) else { continue };
        let module = strings.get(&site.file).map(String::as_str).unwrap_or_default();
        // A return address points after the call, which may be the function's last instruction.
        let found = symbolizer.function(Path::new(module), site.address.saturating_sub(1));
        let name = found.map(str::to_string).unwrap_or_else(|| format!("0x{:x}", site.address));
        let name_id = mlprof_format::string_id(name.as_bytes());
        strings.entry(name_id).or_insert(name);
        site.function = name_id;
    }
    // Ids in order, so that the first site met of each function stands for the others.
    let mut first: HashMap<(u64, u64, u32), u32> = HashMap::new();
    let mut folded = HashMap::new();
    for id in ids {
        let Some(site) = sites.get(&id) else { continue };
        let standing = *first.entry((site.file, site.function, site.parent)).or_insert(id);
        if standing != id {
            folded.insert(id, standing);
        }
    }
    folded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(id: u32, file: u64, address: u64) -> SiteInfo {
        SiteInfo { id, file, function: 0, line: 0, native: true, address, parent: 0 }
    }

    /// Two calls from one function of an unreadable module keep distinct names (their
    /// addresses): nothing to fold them by. A Python site is left alone.
    #[test]
    fn an_unreadable_module_keeps_addresses_as_names() {
        let mut strings =
            HashMap::from([(7, "/nonexistent/libgone.so".to_string()), (8, "a.py".to_string())]);
        let mut sites = HashMap::from([
            (1, native(1, 7, 0x1010)),
            (2, native(2, 7, 0x1020)),
            (3, SiteInfo { id: 3, file: 8, function: 9, line: 4, ..SiteInfo::default() }),
        ]);
        let folded = name(&mut sites, &mut strings);
        assert!(folded.is_empty());
        assert_eq!(strings[&sites[&1].function], "0x1010");
        assert_eq!(strings[&sites[&2].function], "0x1020");
        assert_eq!(sites[&3].function, 9);
    }

    /// Two return addresses inside one function of this test binary fold into the first site.
    #[test]
    fn two_calls_from_one_function_fold_into_one_site() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let first = maps.lines().find(|l| l.ends_with(exe.to_str().unwrap())).unwrap();
        let bias = u64::from_str_radix(first.split('-').next().unwrap(), 16).unwrap();
        let inside = two_calls_from_one_function_fold_into_one_site as *const () as u64 - bias;
        let mut strings = HashMap::from([(7, exe.display().to_string())]);
        let mut sites = HashMap::from([(5, native(5, 7, inside + 9)), (4, native(4, 7, inside + 5))]);
        let folded = name(&mut sites, &mut strings);
        assert_eq!(folded, HashMap::from([(5, 4)]));
        let function = &strings[&sites[&4].function];
        assert!(function.ends_with("two_calls_from_one_function_fold_into_one_site"), "{function}");
    }
}
