use super::*;

const EVAL: std::ops::Range<u64> = 0x5000..0x6000;
const T: u64 = PYTHON_FRAME_TAG;

fn set(native: &[u64], complete: bool, activations: &[Activation<'_>]) -> (bool, Vec<u64>) {
    let mut out = Vec::new();
    let matched = set_in_place(Native { frames: native, complete, copy: None }, &EVAL, activations, &mut out);
    (matched, out)
}

fn unknown<'a>(frames: &'a [u32]) -> Activation<'a> {
    Activation { frames, seen: Seen::Unknown }
}

/// Entries cut the walk into activations; frames after the last entry form one.
#[test]
fn entries_cut_the_frames_into_activations() {
    let cut = activations(&[1, 2, 3, 4], &[false, true, false, false]);
    assert_eq!(cut, [unknown(&[1, 2]), unknown(&[3, 4])]);
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
    let later = [
        Activation { frames: &[9], seen: Seen::Later },
        Activation { frames: &[1], seen: Seen::Same },
        Activation { frames: &[2], seen: Seen::Unknown },
    ];
    assert_eq!(set(&native, true, &later), (false, vec![0x100, T | 1, 0x200, T | 2, 0x300]));
    let changed =
        [Activation { frames: &[1], seen: Seen::Changed }, Activation { frames: &[2], seen: Seen::Same }];
    assert_eq!(set(&native, true, &changed), (false, vec![0x100, 0x5001, 0x200, T | 2, 0x300]));
}

/// The copy and the process: an activation whose `_PyCFrame` (in the copy) held the frame it
/// holds now is the same; another value changed; below the stack pointer, later; the chain is
/// followed through `previous`.
#[test]
fn the_stack_copy_tells_which_activations_were_the_samples() {
    use mlprof_pyframes::layout::V3_11;
    // The "process": a thread state whose cframe chain is 0x7010 → 0x7100 → 0x6ff0.
    struct Mem(Vec<(usize, u64)>);
    impl Memory for Mem {
        fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()> {
            let value = self.0.iter().find(|(at, _)| *at == addr)?.1;
            buf.copy_from_slice(value.to_ne_bytes().get(..buf.len())?);
            Some(())
        }
    }
    let (cur, prev, tstate) = (V3_11.cframe_current as usize, V3_11.cframe_previous as usize, 0x1000);
    let mem = Mem(vec![
        (tstate + V3_11.tstate_frame as usize, 0x7010),
        (0x7010 + cur, 0xaaa0),
        (0x7010 + prev, 0x7100),
        (0x7100 + cur, 0xbbb0),
        (0x7100 + prev, 0x6ff0),
        (0x6ff0 + prev, 0),
    ]);
    // The copy from sp 0x7000: 0x7010's current was 0xaaa0 (same), 0x7100's 0xccc0 (changed).
    let mut bytes = vec![0u8; 0x200];
    bytes[0x10 + cur..0x18 + cur].copy_from_slice(&0xaaa0u64.to_ne_bytes());
    bytes[0x100 + cur..0x108 + cur].copy_from_slice(&0xccc0u64.to_ne_bytes());
    let copy = StackCopy { sp: 0x7000, bytes: &bytes };
    let mut three = [unknown(&[1]), unknown(&[2]), unknown(&[3])];
    check(&mem, &V3_11, tstate, Some(copy), &mut three);
    let seen: Vec<Seen> = three.iter().map(|a| a.seen).collect();
    assert_eq!(seen, [Seen::Same, Seen::Changed, Seen::Later]);
}
