use super::*;

#[test]
fn demangles_cpp_and_rust_and_leaves_c_alone() {
    assert_eq!(demangle("_ZN2at6native5emptyEv"), "at::native::empty()");
    assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
    assert_eq!(demangle("ImagingResample"), "ImagingResample");
}

/// This test binary names its own function: its address in the module is its runtime address
/// less the load bias, which `/proc/self/maps` gives as the mapping of the file's offset 0.
#[test]
fn names_a_function_of_this_test_binary() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let exe_text = exe.to_str().unwrap();
    // The first mapping of the executable maps file offset 0 at the load bias (a PIE's first
    // segment has virtual address 0).
    let first = maps.lines().find(|l| l.ends_with(exe_text)).unwrap();
    let bias = u64::from_str_radix(first.split('-').next().unwrap(), 16).unwrap();
    let here = names_a_function_of_this_test_binary as *const () as u64;
    let mut symbolizer = Symbolizer::new();
    let name = symbolizer.function(&exe, here - bias + 1).unwrap().to_string();
    assert!(name.ends_with("tests::names_a_function_of_this_test_binary"), "{name}");
    assert!(symbolizer.has_symbols(&exe));
}

#[test]
fn an_unreadable_module_names_nothing_and_is_remembered() {
    let mut symbolizer = Symbolizer::new();
    let missing = Path::new("/nonexistent/libgone.so");
    assert_eq!(symbolizer.function(missing, 0x1000), None);
    assert!(!symbolizer.has_symbols(missing));
    let not_elf = Path::new("/etc/hostname");
    assert_eq!(symbolizer.function(not_elf, 0), None);
}

/// A sampled address is an offset in the module's file: the first mapping of this test binary
/// maps offset 0 at the load bias, so the function's offset is its address less the bias plus
/// nothing for a PIE whose first segment starts at file offset 0 and address 0; the text
/// segment's offset and address differ by a page multiple, which the lookup must undo.
#[test]
fn names_a_function_by_its_offset_in_the_file() {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let here = names_a_function_by_its_offset_in_the_file as *const () as u64;
    // The mapping that holds this function, and the file offset it maps.
    let line = maps
        .lines()
        .find(|l| {
            let range = l.split(' ').next().unwrap();
            let (start, end) = range.split_once('-').unwrap();
            let (start, end) =
                (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
            (start..end).contains(&here)
        })
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let start = u64::from_str_radix(fields[0].split('-').next().unwrap(), 16).unwrap();
    let mapped_offset = u64::from_str_radix(fields[2], 16).unwrap();
    let offset = here - start + mapped_offset;
    let mut symbolizer = Symbolizer::new();
    let name = symbolizer.function_at_offset(&exe, offset + 1).unwrap().to_string();
    assert!(name.ends_with("names_a_function_by_its_offset_in_the_file"), "{name}");
}
