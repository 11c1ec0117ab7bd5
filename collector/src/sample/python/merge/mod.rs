//! Which of the Python activations read from a thread were the sample's, and the sample's
//! stack with their frames set in place of the evaluation loop's native frames.
//!
//! The frames are read after the kernel took the sample (a few to ~20 ms). On 3.11 and 3.12
//! every activation of the evaluation loop keeps a `_PyCFrame` on the C stack, whose
//! `current_frame` is that activation's innermost Python frame; the kernel copied the stack
//! at the sample, so for each activation whose `_PyCFrame` lies in the copy, the copy says
//! which frame it was in then, and the process which frame it is in now. Where they agree the
//! activation's frames are the sample's (but possibly the line of its innermost frame, had it
//! moved on within one frame); where they differ it moved on, and its loop frame stays
//! native; an activation below the copied stack pointer started after the sample. 3.13 keeps
//! no `_PyCFrame`: there the activations are paired on trust.

use mlprof_pyframes::layout::{Layout, NONE};
use mlprof_pyframes::memory::Memory;
use mlprof_pyframes::walk::Entry;

use super::{Native, PYTHON_FRAME_TAG, StackCopy};

/// What the sample's stack copy says of an activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// It was in the same Python frame when the sample was taken.
    Same,
    /// It was in another frame (or another activation stood there).
    Changed,
    /// It started after the sample (its `_PyCFrame` lies below the sampled stack pointer).
    Later,
    /// The copy cannot tell (beyond the copied bytes, or no `_PyCFrame` in this version).
    Unknown,
}

/// One activation of the evaluation loop: its Python frames' ids, innermost first, where its
/// innermost frame is now, and what the sample's stack copy says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Activation<'a> {
    pub(super) frames: &'a [u32],
    pub(super) innermost: usize,
    pub(super) seen: Seen,
}

/// The walk's frames cut into activations (`entries[i]`: of frame `i`), innermost first;
/// frames after the last outermost one (a walk cut short) form one.
pub(super) fn activations<'a>(python: &'a [u32], entries: &[Entry]) -> Vec<Activation<'a>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, entry) in entries.iter().enumerate() {
        if entry.outermost || i + 1 == entries.len() {
            let innermost = entries.get(start).map_or(0, |e| e.address);
            let frames = python.get(start..=i).unwrap_or_default();
            out.push(Activation { frames, innermost, seen: Seen::Unknown });
            start = i + 1;
        }
    }
    out
}

/// Marks each activation with what the sample's copy of the stack says of it (see the
/// module): the `_PyCFrame`s are followed from the thread's innermost one (`cframe`, as the
/// walk found it), innermost first, one per activation, through the copy while it holds them
/// (an activation that is the same since the sample has the same `previous`), and compared with
/// the frame each activation is in now.
pub(super) fn check(
    mem: &impl Memory,
    layout: &Layout,
    cframe: usize,
    copy: Option<StackCopy<'_>>,
    activations: &mut [Activation<'_>],
) {
    let (Some(copy), false) = (copy, layout.cframe_previous == NONE || cframe == 0) else { return };
    let (current, previous) = (layout.cframe_current as u64, layout.cframe_previous as u64);
    let mut at = cframe as u64;
    for activation in activations.iter_mut() {
        if at == 0 {
            break;
        }
        let then = copy.u64(at + current);
        activation.seen = match then {
            _ if at < copy.sp => Seen::Later,
            None => break,
            Some(then) if then == activation.innermost as u64 => Seen::Same,
            Some(_) => Seen::Changed,
        };
        // An activation begun since the sample lies below the copy: its link is in the process.
        let Some(next) = copy.u64(at + previous).or_else(|| mem.u64((at + previous) as usize)) else { break };
        at = next;
    }
}

/// `native` into `out` with the activations' frames in place of the loop's native frames.
/// Activations that started after the sample are left out; a complete native stack is paired
/// from its root, one cut short from its leaf (the activations it did not reach go at its
/// root end). A changed activation keeps its native loop frame, and so does the innermost
/// pair when nothing could be checked and the counts differ. Whether every activation was the
/// sample's and the counts agree (a stack cut short: it has no more loop frames than
/// activations).
pub(super) fn set_in_place(
    native: Native<'_>,
    eval: &std::ops::Range<u64>,
    activations: &[Activation<'_>],
    out: &mut Vec<u64>,
) -> bool {
    let kept: Vec<&Activation<'_>> = activations.iter().filter(|a| a.seen != Seen::Later).collect();
    // A return address points after its call: the call itself is the byte before.
    let is_loop =
        |i: usize, address: u64| eval.contains(&if i == 0 { address } else { address.wrapping_sub(1) });
    let loops: Vec<usize> =
        native.frames.iter().enumerate().filter(|&(i, &a)| is_loop(i, a)).map(|(i, _)| i).collect();
    let counted = loops.len() == kept.len();
    let checked = kept.iter().any(|a| a.seen != Seen::Unknown);
    // A stack cut short shows only its innermost loop frames.
    let fits = if native.complete { counted } else { loops.len() <= kept.len() };
    let matched = fits && kept.len() == activations.len() && kept.iter().all(|a| a.seen != Seen::Changed);
    // Native loop frame index → the activation set in its place.
    let mut pairs: Vec<(usize, &Activation<'_>)> = if native.complete {
        let common = loops.len().min(kept.len());
        let paired = if counted || checked { common } else { common.saturating_sub(1) };
        loops.iter().rev().zip(kept.iter().rev()).take(paired).map(|(&i, &a)| (i, a)).collect()
    } else {
        loops.iter().zip(kept.iter()).map(|(&i, &a)| (i, a)).collect()
    };
    pairs.retain(|(_, a)| a.seen != Seen::Changed);
    let tag = |id: &u32| PYTHON_FRAME_TAG | u64::from(*id);
    out.clear();
    for (i, &address) in native.frames.iter().enumerate() {
        match pairs.iter().find(|(at, _)| *at == i) {
            Some((_, activation)) => out.extend(activation.frames.iter().map(tag)),
            None => out.push(address),
        }
    }
    if !native.complete {
        for activation in kept.iter().skip(loops.len()).filter(|a| a.seen != Seen::Changed) {
            out.extend(activation.frames.iter().map(tag));
        }
    }
    matched
}

#[cfg(test)]
mod tests;
