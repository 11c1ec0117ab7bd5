//! The code mappings of a process that already runs when the sampler attaches, from
//! `/proc/PID/maps`: the kernel reports only mappings made after the events were opened.

/// One executable file mapping: `start-end perms pgoff dev inode path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MapsLine {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pgoff: u64,
    pub(crate) inode: u64,
    pub(crate) path: Vec<u8>,
}

/// The executable mappings listed in `maps` (the text of `/proc/PID/maps`): only those, as the
/// kernel's MMAP2 records of the events (`mmap=1`, no `mmap_data`) are.
pub(crate) fn executable_mappings(maps: &[u8]) -> Vec<MapsLine> {
    maps.split(|&b| b == b'\n').filter_map(parse_line).collect()
}

fn parse_line(line: &[u8]) -> Option<MapsLine> {
    let mut fields = line.splitn(6, |&b| b == b' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let pgoff = fields.next()?;
    let _dev = fields.next()?;
    let inode = fields.next()?;
    let path = fields.next().unwrap_or(b"").trim_ascii_start();
    if perms.get(2) != Some(&b'x') {
        return None;
    }
    let dash = range.iter().position(|&b| b == b'-')?;
    let hex = |bytes: &[u8]| u64::from_str_radix(std::str::from_utf8(bytes).ok()?, 16).ok();
    Some(MapsLine {
        start: hex(&range[..dash])?,
        end: hex(&range[dash + 1..])?,
        pgoff: hex(pgoff)?,
        inode: std::str::from_utf8(inode).ok()?.parse().ok()?,
        path: path.to_vec(),
    })
}

/// The executable mappings of `pid` now; none when it is gone or not ours to read.
pub(crate) fn read(pid: u32) -> Vec<MapsLine> {
    std::fs::read(format!("/proc/{pid}/maps")).map(|text| executable_mappings(&text)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_lines_only_with_their_paths() {
        let maps = b"55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1311 /usr/bin/prog\n\
55d0c0a01000-55d0c0a02000 r-xp 00001000 fd:01 1311 /usr/bin/prog\n\
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n\
7f1000001000-7f1000002000 r-xp 00001000 fd:01 99                         /tmp/a dir/libhot.so\n\
7ffd1e5f2000-7ffd1e5f4000 r-xp 00000000 00:00 0                          [vdso]\n";
        let lines = executable_mappings(maps);
        assert_eq!(
            lines,
            vec![
                MapsLine {
                    start: 0x55d0c0a01000,
                    end: 0x55d0c0a02000,
                    pgoff: 0x1000,
                    inode: 1311,
                    path: b"/usr/bin/prog".to_vec()
                },
                MapsLine {
                    start: 0x7f1000001000,
                    end: 0x7f1000002000,
                    pgoff: 0x1000,
                    inode: 99,
                    path: b"/tmp/a dir/libhot.so".to_vec()
                },
                MapsLine {
                    start: 0x7ffd1e5f2000,
                    end: 0x7ffd1e5f4000,
                    pgoff: 0,
                    inode: 0,
                    path: b"[vdso]".to_vec()
                },
            ]
        );
    }
}
