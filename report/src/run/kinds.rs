//! What a record's `kind` says, as a table: the function, its class and API, and whether it
//! names a path of its own. Every pass over a run's events asks this once per event, and
//! `Func::from_id` and `Func::class` are long matches.

use mlprof_format::func::{Api, Class, Func};
use mlprof_format::record::Event;

/// What a record's `kind` says, looked up once per event.
#[derive(Clone, Copy)]
pub(crate) struct Kind {
    pub(crate) func: Func,
    pub(crate) class: Class,
    pub(crate) api: Api,
    /// A libc function with a path argument.
    pub(crate) has_path: bool,
}

impl Kind {
    /// Whether the call names a path of its own (an open, a stat by path, an unlink): the
    /// calls whose path index a streaming pass notes ([`crate::run::stream`]).
    #[inline]
    pub(crate) fn names_path(&self, event: &Event) -> bool {
        self.has_path && event.arg2 != 0
    }
}

/// Kinds of the functions known, by id.
const KINDS: usize = 1024;
static KIND_TABLE: [Option<Kind>; KINDS] = {
    let mut table = [None; KINDS];
    let mut kind = 0;
    while kind < KINDS {
        if let Some(func) = Func::from_id(kind as u16) {
            let (class, api) = (func.class(), func.api());
            let has_path = matches!(api, Api::Libc) && func.has_path();
            table[kind] = Some(Kind { func, class, api, has_path });
        }
        kind += 1;
    }
    table
};

/// What a record's kind says, if it is a function this build knows.
#[inline]
pub(crate) fn kind_of(kind: u16) -> Option<Kind> {
    KIND_TABLE.get(kind as usize).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_agrees_with_the_functions() {
        for &func in Func::ALL {
            let kind = kind_of(func as u16).expect("every function is in the table");
            assert_eq!((kind.func, kind.class, kind.api), (func, func.class(), func.api()));
            assert_eq!(kind.has_path, func.api() == Api::Libc && func.has_path());
        }
        // And nothing else: every id the table knows is one of `Func::ALL` (the export's
        // function names are an array over those), none past the table.
        let known = (0..KINDS as u16).filter(|&id| kind_of(id).is_some()).count();
        assert_eq!(known, Func::ALL.len());
        assert!(kind_of(u16::MAX).is_none());
    }
}
