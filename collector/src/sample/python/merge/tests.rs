use super::*;

const EVAL: std::ops::Range<u64> = 0x5000..0x6000;
const T: u64 = PYTHON_FRAME_TAG;

fn set(native: &[u64], complete: bool, activations: &[Activation<'_>]) -> (bool, Vec<u64>) {
    let mut out = Vec::new();
    let matched = set_in_place(Native { frames: native, complete, copy: None }, &EVAL, activations, &mut out);
    (matched, out)
}

fn unknown<'a>(frames: &'a [u32]) -> Activation<'a> {
    Activation { frames, innermost: 0, seen: Seen::Unknown }
}

fn seen<'a>(frames: &'a [u32], seen: Seen) -> Activation<'a> {
    Activation { frames, innermost: 0, seen }
}

/// Entries cut the walk into activations, each with its innermost frame's address; frames
/// after the last outermost one form one.
#[test]
fn entries_cut_the_frames_into_activations() {
    let entry = |outermost, address| Entry { outermost, address };
    let entries = [entry(false, 0x10), entry(true, 0x20), entry(false, 0x30), entry(false, 0x40)];
    let cut = activations(&[1, 2, 3, 4], &entries);
    let first = Activation { frames: &[1, 2], innermost: 0x10, seen: Seen::Unknown };
    let second = Activation { frames: &[3, 4], innermost: 0x30, seen: Seen::Unknown };
    assert_eq!(cut, [first, second]);
}

/// A leaf in C called from Python, two activations of the loop (C called back into Python in
/// between): each loop frame gives way to its activation's Python frames, innermost first; the
/// C frames stay where they are.
#[test]
fn each_activation_replaces_its_loop_frame() {
    // leaf in libc, return into the loop, a C callback, return into the loop, main.
    let native = [0x100, 0x5010, 0x200, 0x5020, 0x300];
    let two = [unknown(&[1, 2]), unknown(&[3, 4])];
    assert_eq!(set(&native, true, &two), (true, vec![0x100, T | 1, T | 2, 0x200, T | 3, T | 4, 0x300]));
}

/// A native stack cut short (one loop frame reached of two): paired from the leaf, the outer
/// activation at the root end; that fits. A return address just past the loop's end (a call
/// that is its last instruction) is still the loop's.
#[test]
fn activations_a_cut_stack_did_not_reach_go_at_its_root() {
    let two = [unknown(&[1]), unknown(&[2, 3])];
    assert_eq!(set(&[0x100, 0x6000], false, &two), (true, vec![0x100, T | 1, T | 2, T | 3]));
    // More loop frames than activations does not fit even a stack cut short.
    assert!(!set(&[0x5000, 0x5001], false, &two[..1]).0);
}

/// Counts that differ on a complete stack with nothing checked (3.13): paired from the root,
/// the innermost pair left out.
#[test]
fn unchecked_counts_that_differ_leave_the_innermost_pair_native() {
    let native = [0x100, 0x5001, 0x200, 0x5002, 0x300, 0x5003, 0x400];
    let two = [unknown(&[1]), unknown(&[2, 3])];
    assert_eq!(
        set(&native, true, &two),
        (false, vec![0x100, 0x5001, 0x200, 0x5002, 0x300, T | 2, T | 3, 0x400])
    );
    let four = [unknown(&[1]), unknown(&[2]), unknown(&[3]), unknown(&[4])];
    assert_eq!(set(&native, true, &four), (false, vec![0x100, 0x5001, 0x200, T | 3, 0x300, T | 4, 0x400]));
}

/// Checked activations: one that started after the sample is left out (the rest pair up and
/// match), one that changed keeps its native loop frame.
#[test]
fn checked_activations_set_only_what_the_sample_had() {
    let native = [0x100, 0x5001, 0x200, 0x5002, 0x300];
    let later = [seen(&[9], Seen::Later), seen(&[1], Seen::Same), seen(&[2], Seen::Unknown)];
    assert_eq!(set(&native, true, &later), (false, vec![0x100, T | 1, 0x200, T | 2, 0x300]));
    let changed = [seen(&[1], Seen::Changed), seen(&[2], Seen::Same)];
    assert_eq!(set(&native, true, &changed), (false, vec![0x100, 0x5001, 0x200, T | 2, 0x300]));
}

/// The copy against the walk: an activation whose `_PyCFrame` (in the copy) held the frame it
/// is in now is the same; another value changed; the chain goes on through the copy's
/// `previous`; a `_PyCFrame` below the stack pointer began after the sample (its link read from
/// the process); one beyond the copy cannot be told.
#[test]
fn the_stack_copy_tells_which_activations_were_the_samples() {
    use mlprof_pyframes::layout::V3_11;
    struct Mem(Vec<(usize, u64)>);
    impl Memory for Mem {
        fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()> {
            let value = self.0.iter().find(|(at, _)| *at == addr)?.1;
            buf.copy_from_slice(value.to_ne_bytes().get(..buf.len())?);
            Some(())
        }
    }
    let (cur, prev) = (V3_11.cframe_current as usize, V3_11.cframe_previous as usize);
    // The process: a _PyCFrame begun since the sample at 0x6f00, whose link is 0x7010.
    let mem = Mem(vec![(0x6f00 + prev, 0x7010)]);
    // The copy from sp 0x7000: 0x7010 was in frame 0xaaa0 and links to 0x7100, which was in
    // 0xccc0 and links to 0x9000, beyond the copy.
    let mut bytes = vec![0u8; 0x200];
    let mut put =
        |at: usize, value: u64| bytes[at - 0x7000..at - 0x7000 + 8].copy_from_slice(&value.to_ne_bytes());
    put(0x7010 + cur, 0xaaa0);
    put(0x7010 + prev, 0x7100);
    put(0x7100 + cur, 0xccc0);
    put(0x7100 + prev, 0x9000);
    let copy = StackCopy { sp: 0x7000, bytes: &bytes };
    let now = |innermost| Activation { frames: &[1], innermost, seen: Seen::Unknown };
    let mut four = [now(0x5550), now(0xaaa0), now(0xbbb0), now(0xddd0)];
    check(&mem, &V3_11, 0x6f00, Some(copy), &mut four);
    let seen: Vec<Seen> = four.iter().map(|a| a.seen).collect();
    assert_eq!(seen, [Seen::Later, Seen::Same, Seen::Changed, Seen::Unknown]);
}
