//! The reader over synthetic memory images of each version's structures (built from the same
//! layout tables, so these check the decoding; the offsets themselves are checked against
//! live interpreters in `live.rs`).

mod image;
mod live;

use super::code::{self, Types};
use super::layout::{self, Layout, NONE};
use super::linetable::encode;
use super::walk::{Walked, frames_of};
use super::{Described, Frame};
use image::World;

const ALL: [Layout; 4] = [layout::V3_10, layout::V3_11, layout::V3_12, layout::V3_13];

/// A thread three Python frames deep, with a C-owned entry frame between the two inner ones
/// (3.12+) and an outer frame that has not started yet.
struct Scene {
    world: World,
    tstate: usize,
    /// (code, offset, file, function, line) innermost first.
    expected: Vec<(usize, u32, &'static str, &'static str, u32)>,
}

fn ranges() -> Vec<(u32, Option<i32>)> {
    vec![(4, Some(100)), (2, None), (6, Some(104)), (200, Some(-3 + 900)), (6, Some(97))]
}

fn scene(layout: Layout) -> Scene {
    let mut world = World::new(layout);
    let ascii = world.code("/srv/train.py", "Loader.__next__", 99, &ranges());
    let latin = world.code("/srv/données/modèle.py", "charger_λ", 10, &[(10, Some(12)), (10, Some(13))]);
    let wide = world.code("/srv/𝔣.py", "<module>", 1, &[(4, Some(1))]);
    // Byte offsets: `unit` bytes a table step (3.10 counts bytes, 3.11+ code units).
    let unit = if layout.kind == layout::FrameKind::Object { 1 } else { 2 };
    let outer = world.frame(wide, None, 0, 0);
    let middle = world.frame(latin, Some(12 * unit), outer, 0);
    let entry = match layout.frame_owner {
        NONE => middle,
        _ => world.frame(ascii, Some(0), middle, layout::FRAME_OWNED_BY_CSTACK),
    };
    let inner = world.frame(ascii, Some(8 * unit), entry, 0);
    let tstate = world.thread(inner);
    let expected = vec![
        (ascii, 8 * unit, "/srv/train.py", "Loader.__next__", 104),
        (latin, 12 * unit, "/srv/données/modèle.py", "charger_λ", 13),
        (wide, 0, "/srv/𝔣.py", "<module>", 1),
    ];
    Scene { world, tstate, expected }
}

fn walk(world: &World, tstate: usize, n: usize) -> (Walked, Vec<Frame>) {
    let mut out = vec![Frame::default(); n];
    let walked = frames_of(&world.image, &world.layout, world.types.code, tstate, &mut out);
    out.truncate(walked.count);
    (walked, out)
}

fn describe(
    world: &World,
    frame: Frame,
    file_room: usize,
    func_room: usize,
) -> Option<(String, String, u32)> {
    let (mut file, mut func) = (vec![0u8; file_room], vec![0u8; func_room]);
    let Described { file_len, func_len, line } = code::describe(
        &world.image,
        &world.layout,
        &world.types,
        frame.code,
        frame.offset,
        &mut file,
        &mut func,
    )?;
    let text = |buf: &[u8], len| String::from_utf8(buf[..len].to_vec()).expect("whole characters");
    Some((text(&file, file_len), text(&func, func_len), line))
}

#[test]
fn every_version_walks_its_frames_and_describes_them() {
    for layout in ALL {
        let Scene { world, tstate, expected } = scene(layout);
        let v = layout.minor;
        let (walked, frames) = walk(&world, tstate, 8);
        assert_eq!(walked, Walked { count: 3, broken: false }, "3.{v}");
        for (frame, &(code, offset, file, func, line)) in frames.iter().zip(&expected) {
            assert_eq!(*frame, Frame { code, offset }, "3.{v}");
            let described = describe(&world, *frame, 256, 256).expect("described");
            assert_eq!(described, (file.into(), func.into(), line), "3.{v}");
        }
        for n in [0, 1, 2] {
            let (walked, frames) = walk(&world, tstate, n);
            assert_eq!((walked.count, walked.broken), (n, false), "3.{v}: --sites={n}");
            assert_eq!(frames.first().map(|f| f.code), (n > 0).then_some(expected[0].0));
        }
    }
}

#[test]
fn offsets_without_a_line_and_past_the_table_have_line_zero() {
    for layout in ALL {
        let Scene { world, expected, .. } = scene(layout);
        let unit = if layout.kind == layout::FrameKind::Object { 1 } else { 2 };
        let ascii = expected[0].0;
        for (offset, line) in [(0, 100), (4, 0), (6, 104), (12, 897), (211, 897), (212, 97), (300, 0)] {
            let got = describe(&world, Frame { code: ascii, offset: offset * unit }, 64, 64).unwrap();
            assert_eq!(got.2, line, "3.{} offset {offset}", layout.minor);
        }
    }
}

#[test]
fn names_are_cut_at_a_character_boundary() {
    for layout in ALL {
        let Scene { world, expected, .. } = scene(layout);
        let frame = Frame { code: expected[1].0, offset: 0 };
        // "/srv/donn" is 9 bytes, "é" two more: 10 bytes of room keep 9.
        let (file, func, _) = describe(&world, frame, 10, 9).unwrap();
        assert_eq!((file.as_str(), func.as_str()), ("/srv/donn", "charger_"));
        let (file, _, _) = describe(&world, Frame { code: expected[2].0, offset: 0 }, 8, 0).unwrap();
        assert_eq!(file, "/srv/", "a 4-byte character that does not fit is left out");
    }
}

#[test]
fn a_thread_without_python_has_no_frames() {
    for layout in ALL {
        let mut world = World::new(layout);
        let idle = world.thread(0);
        assert_eq!(walk(&world, idle, 4).0, Walked { count: 0, broken: false });
    }
}

#[test]
fn identity_tells_another_object_at_the_same_address() {
    for layout in ALL {
        let Scene { mut world, expected, .. } = scene(layout);
        let code = expected[0].0;
        let id = code::identity(&world.image, &world.layout, world.types.code, code);
        assert_ne!(id, 0);
        assert_eq!(id, code::identity(&world.image, &world.layout, world.types.code, code), "stable");
        assert_eq!(code::identity(&world.image, &world.layout, world.types.code, world.types.unicode), 0);
        // The address now holds another code object (another file name).
        let other = world.string("/srv/other.py");
        world.image.put_u64(code + layout.code_filename as usize, other as u64);
        assert_ne!(code::identity(&world.image, &world.layout, world.types.code, code), id);
    }
}

#[test]
fn damaged_chains_end_the_walk_without_a_fault() {
    for layout in ALL {
        let v = layout.minor;
        let Scene { mut world, tstate, expected } = scene(layout);
        // Garbage thread states: nothing, counted as broken.
        for bad in [0usize, 8, 0xdead_beef_0000_0000, world.image.end() + 4096] {
            let (walked, _) = walk(&world, bad, 4);
            assert_eq!(walked, Walked { count: 0, broken: true }, "3.{v} tstate {bad:#x}");
        }
        let inner = world.innermost(tstate);
        let previous = inner + layout.frame_previous as usize;
        let caller = world.image.get_u64(previous);
        // A caller pointer that is no pointer, or points where nothing is mapped: the frame
        // before it is kept.
        for bad in [0x41u64, 0xffff_8000_0000_0000, (world.image.end() + 0x10_0000) as u64] {
            world.image.put_u64(previous, bad);
            let (walked, frames) = walk(&world, tstate, 4);
            assert_eq!(walked, Walked { count: 1, broken: true }, "3.{v} previous {bad:#x}");
            assert_eq!(frames[0].code, expected[0].0);
        }
        // A loop ends too.
        world.image.put_u64(previous, inner as u64);
        let (walked, _) = walk(&world, tstate, 3);
        assert_eq!(walked.count, 3, "3.{v}: a loop repeats the same frame until out is full");
        let (walked, _) = walk(&world, tstate, 0);
        assert_eq!(walked.count, 0);
        world.image.put_u64(previous, caller);
        // A code object of another type: 3.13's executables may be other objects (skipped),
        // before that it is damage.
        let code_field = inner + layout.frame_code as usize;
        world.image.put_u64(code_field, world.types.unicode as u64);
        let (walked, _) = walk(&world, tstate, 2);
        assert_eq!(walked.broken, v < 13, "3.{v}");
        // An instruction pointer nowhere near its code.
        world.image.put_u64(code_field, expected[0].0 as u64);
        world.image.put_u64(previous, 0);
        world.image.put_u64(inner + layout.frame_instr as usize, u64::MAX / 2);
        let (walked, _) = walk(&world, tstate, 2);
        // (3.10 holds an index, whose bad values read as "not started").
        let expect =
            if v == 10 { Walked { count: 1, broken: false } } else { Walked { count: 0, broken: true } };
        assert_eq!(walked, expect, "3.{v}");
    }
}

#[test]
fn damaged_code_objects_are_not_described() {
    for layout in ALL {
        let Scene { mut world, expected, .. } = scene(layout);
        let code = expected[0].0;
        let frame = Frame { code, offset: 0 };
        assert_eq!(describe(&world, Frame { code: 0x40, offset: 0 }, 64, 64), None);
        assert_eq!(describe(&world, Frame { code: world.types.code, offset: 0 }, 64, 64), None);
        for (field, bad) in [
            (layout.code_filename, 0x10u64),
            (layout.code_filename, world.types.bytes as u64),
            (layout.code_name, 0xdead_0000_0000),
            (layout.code_linetable, world.string("not bytes") as u64),
        ] {
            let at = code + field as usize;
            let good = world.image.get_u64(at);
            world.image.put_u64(at, bad);
            assert_eq!(describe(&world, frame, 64, 64), None, "3.{} field {field}", layout.minor);
            world.image.put_u64(at, good);
        }
        // A line table longer than the memory behind it: read until the memory ends (no
        // description), or until what follows the table is not one (no line).
        let table = world.image.get_u64(code + layout.code_linetable as usize) as usize;
        world.image.put_u64(table + layout::BYTES_SIZE, 1 << 19);
        let far = describe(&world, Frame { code, offset: u32::MAX - 1 }, 64, 64);
        assert_eq!(far.map_or(0, |(_, _, line)| line), 0, "3.{}", layout.minor);
    }
}

#[test]
fn debug_offsets_give_the_3_13_layout_and_refuse_what_they_cannot_be() {
    let mut world = World::new(layout::V3_13);
    let runtime = world.debug_offsets(*b"xdebugpy", 0x030d_00f0, 0);
    assert_eq!(layout::from_debug_offsets(&world.image, runtime), Ok(layout::V3_13));
    for (cookie, version, free, error) in [
        (*b"xdebugpz", 0x030d_00f0, 0, layout::DebugOffsetsError::Cookie),
        (*b"xdebugpy", 0x030e_00f0, 0, layout::DebugOffsetsError::Version),
        (*b"xdebugpy", 0x030d_00f0, 1, layout::DebugOffsetsError::FreeThreaded),
    ] {
        let runtime = world.debug_offsets(cookie, version, free);
        assert_eq!(layout::from_debug_offsets(&world.image, runtime), Err(error));
    }
    // An offset past its structure's size.
    let runtime = world.debug_offsets(*b"xdebugpy", 0x030d_00f0, 0);
    world.image.put_u64(runtime + 184, 1 << 40);
    assert_eq!(
        layout::from_debug_offsets(&world.image, runtime),
        Err(layout::DebugOffsetsError::Implausible)
    );
    assert_eq!(layout::from_debug_offsets(&world.image, 0x40), Err(layout::DebugOffsetsError::Unreadable));
}

#[test]
fn versions_from_hex_and_text() {
    assert_eq!(layout::version_from_hex(0x030b_07f0), (3, 11));
    assert_eq!(layout::version_from_text(b"3.10.13 (main, May  9 2026) [GCC 12.2.0]"), Some((3, 10)));
    assert_eq!(layout::version_from_text(b"3.9"), Some((3, 9)));
    for bad in [&b""[..], b"3", b"x3.10", b"3-10", b"3.", b"300.1"] {
        assert_eq!(layout::version_from_text(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(layout::for_version(3, 14), None);
    assert_eq!(layout::for_version(3, 9), None);
}

#[test]
fn tables_agree_with_encoders_used_here() {
    // The encoders the images use are the ones `linetable`'s own tests check line by line.
    let table = encode::table_pep657(1, &[(3, Some(2))]);
    assert_eq!(super::linetable::line_pep657(table.into_iter(), 1, 4), Some(2));
    let _: Types = World::new(layout::V3_12).types;
}
