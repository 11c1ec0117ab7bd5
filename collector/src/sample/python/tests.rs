use super::*;

const EVAL: std::ops::Range<u64> = 0x5000..0x6000;
const T: u64 = PYTHON_FRAME_TAG;

/// A leaf in C called from Python, two activations of the loop (C called back into Python in
/// between): each loop frame gives way to its activation's Python frames, innermost first; the
/// C frames stay where they are.
#[test]
fn each_activation_replaces_its_loop_frame() {
    // leaf in libc, return into the loop, a C callback, return into the loop, main.
    let native = [0x100, 0x5010, 0x200, 0x5020, 0x300];
    let (python, entries) = ([1, 2, 3, 4], [false, true, false, true]);
    let mut out = Vec::new();
    assert!(set_in_place(&native, &EVAL, &python, &entries, &mut out));
    assert_eq!(out, [0x100, T | 1, T | 2, 0x200, T | 3, T | 4, 0x300]);
}

/// A native stack cut short (one loop frame reached of two): the outer activation goes at the
/// root end, and the sample counts as unmatched. A return address just past the loop's end
/// (a call that is its last instruction) is still the loop's.
#[test]
fn activations_the_native_stack_did_not_reach_go_at_its_root() {
    let native = [0x100, 0x6000];
    let (python, entries) = ([1, 2, 3], [true, false, true]);
    let mut out = Vec::new();
    assert!(!set_in_place(&native, &EVAL, &python, &entries, &mut out));
    assert_eq!(out, [0x100, T | 1, T | 2, T | 3]);
}

/// More loop frames than activations (the thread returned from Python before its frames were
/// read): the stack stays native, unmatched. A walk cut before any entry still forms an
/// activation.
#[test]
fn loop_frames_without_an_activation_keep_the_stack_native() {
    let native = [0x5001, 0x5002];
    let mut out = Vec::new();
    assert!(!set_in_place(&native, &EVAL, &[7], &[false], &mut out));
    assert_eq!(out, native);
    assert!(set_in_place(&native[1..], &EVAL, &[7], &[false], &mut out));
    assert_eq!(out, [T | 7]);
}
