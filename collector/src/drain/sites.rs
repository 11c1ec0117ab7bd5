//! Call sites (`--sites`): each process numbers its own sites and defines them once
//! ([`mlprof_format::site`]); the run file gives each distinct (file, function, line) one
//! run-wide id, so that the same line run by several processes (DataLoader workers) is one site.

use rustc_hash::FxHashMap as HashMap;
use std::io;

use mlprof_format::ids::Ids;
use mlprof_format::record::Event;
use mlprof_format::runfile::RunWriter;
use mlprof_format::site::{SITE_NATIVE, SiteInfo};

/// The sites met so far.
#[derive(Default)]
pub(super) struct Sites {
    /// Run-wide id of each process image's site number, by (pid, image nonce, number): an
    /// image numbers its sites from 1 (an `exec` keeps the pid, a fork child the image).
    by_process: HashMap<(u32, u64, u32), u32>,
    /// Run-wide id of each distinct site: (file, function, line, parent's id, native caller's
    /// address in its module). A native caller is its module and address (the same in every
    /// process that maps the module); the reports name its function.
    by_content: Ids<(u64, u64, u32, u32, Option<u64>)>,
    /// Records whose process named a site it had not defined (counted, left without one).
    pub(super) undefined: u64,
}

impl Sites {
    /// A [`mlprof_format::site::KIND_SITE_DEF`] of process `pid`, image `image`: its number
    /// now stands for a run-wide site, written to the run file the first time it is met.
    pub(super) fn define(
        &mut self,
        writer: &mut RunWriter<impl io::Write>,
        (pid, image): (u32, u64),
        record: &Event,
    ) -> io::Result<()> {
        let number = record.fd as u32;
        if number == 0 {
            return Ok(());
        }
        let native = record.flags & SITE_NATIVE != 0;
        // The caller's site, defined before it by the same process (`--sites=N`).
        let parent = match record.start as u32 {
            0 => 0,
            number => self.by_process.get(&(pid, image, number)).copied().unwrap_or(0),
        };
        let address = if native { record.ret as u64 } else { 0 };
        let key = (record.arg, record.arg2, record.extra, parent, native.then_some(address));
        let (id, new) = self.by_content.id(key);
        if new {
            let site = SiteInfo {
                id,
                file: record.arg,
                function: record.arg2,
                line: record.extra,
                native,
                address,
                parent,
            };
            writer.write_site(&site)?;
        }
        self.by_process.insert((pid, image, number), id);
        Ok(())
    }

    /// The run-wide id of site `number` of process `pid`, image `image`, when it was defined.
    #[inline]
    pub(super) fn lookup(&self, (pid, image): (u32, u64), number: u32) -> Option<u32> {
        self.by_process.get(&(pid, image, number)).copied()
    }

    /// The run-wide id of site `number` of process `pid`, image `image` (0: none, or one it
    /// never defined, counted).
    #[inline]
    pub(super) fn id(&mut self, process: (u32, u64), number: u32) -> u32 {
        self.lookup(process, number).unwrap_or_else(|| {
            self.undefined += 1;
            0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlprof_format::runfile::{Frame, RunEnd, RunInfo, RunReader};
    use mlprof_format::site::KIND_SITE_DEF;

    fn definition(number: i32, file: u64, line: u32) -> Event {
        Event { kind: KIND_SITE_DEF, fd: number, arg: file, arg2: 9, extra: line, ..Event::default() }
    }

    #[test]
    fn the_same_line_in_two_processes_is_one_site_written_once() {
        let mut writer = RunWriter::new(Vec::new(), &RunInfo::default()).unwrap();
        let mut sites = Sites::default();
        // Two workers number the same line differently; a third line is a new site.
        sites.define(&mut writer, (10, 1), &definition(1, 100, 42)).unwrap();
        sites.define(&mut writer, (11, 1), &definition(5, 100, 42)).unwrap();
        sites.define(&mut writer, (11, 1), &definition(6, 100, 43)).unwrap();
        assert_eq!((sites.id((10, 1), 1), sites.id((11, 1), 5), sites.id((11, 1), 6)), (1, 1, 2));
        assert_eq!((sites.id((10, 1), 2), sites.undefined), (0, 1));
        // Process 11 `exec`s (a new image, numbering from 1 again): its number 5 is not the old
        // image's until it defines it.
        assert_eq!(sites.lookup((11, 2), 5), None);
        sites.define(&mut writer, (11, 2), &definition(5, 100, 43)).unwrap();
        assert_eq!((sites.lookup((11, 2), 5), sites.lookup((11, 1), 5)), (Some(2), Some(1)));
        let bytes = writer.finish(&RunEnd::default()).unwrap();
        let mut reader = RunReader::new(&bytes[..]).unwrap();
        let mut written = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            if let Frame::Site(site) = frame {
                written.push((site.id, site.line));
            }
        }
        assert_eq!(written, [(1, 42), (2, 43)]);
    }
}
