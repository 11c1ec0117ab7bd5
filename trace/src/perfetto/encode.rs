//! Encoding events: interned tables and per-sequence iid sets, annotation keys, and the
//! TrackEvent body of a slice or instant (interning what it names first).

use super::TraceOutput;

use super::PerfettoWriter;
use super::field::*;
use crate::proto::{LEN, VARINT, append, put_bytes, put_fixed64, put_message, put_tag, put_uint};
use crate::{ArgShape, ArgValue, Args, Instant, Slice, StringHandle};

pub(super) const ANNOTATION_CACHE_SLOTS: usize = 64;
/// The most bytes a debug annotation with a varint value takes: its tag and length, the key's
/// tag and iid (a varint of up to 32 bits), the value's tag (up to 2 bytes) and varint.
pub(super) const MAX_ANNOTATION: usize = 2 + 1 + 5 + 2 + 10;

/// Arguments of an event a [`Template`] can write.
pub(super) const TEMPLATE_ARGS: usize = 8;
/// Templates a sequence keeps (direct-mapped by event name).
pub(super) const TEMPLATE_SLOTS: usize = 16;

/// The bytes of an event's fields that repeat from one event to the next on a sequence: its
/// type, name and category, and each argument's key and value type. Built after an event was
/// encoded the general way (so everything it names is interned on the sequence); an event
/// with the same name, category, keys and value types is then written from it, only its
/// values (and the interning of interned values) left to do.
#[derive(Clone, Copy)]
pub(super) struct Template {
    kind: u64,
    name: u32,
    category: u32,
    /// The [`ArgShape`] of the event it was made from: an event of the same name, category
    /// and (non-zero) shape has its keys and value types, without comparing them.
    shape: ArgShape,
    /// Arguments; `u8::MAX`: an empty slot.
    len: u8,
    keys: [&'static str; TEMPLATE_ARGS],
    /// [`value_code`] of each argument.
    codes: [u8; TEMPLATE_ARGS],
    /// Type, name and category fields.
    header: [u8; 16],
    header_len: u8,
    /// Each annotation's tag, a length byte to fill in, its key iid field and its value's tag.
    prefixes: [[u8; 12]; TEMPLATE_ARGS],
    prefix_lens: [u8; TEMPLATE_ARGS],
}

impl Template {
    pub(super) const EMPTY: Template = Template {
        kind: 0,
        name: 0,
        category: 0,
        shape: ArgShape::NONE,
        len: u8::MAX,
        keys: [""; TEMPLATE_ARGS],
        codes: [0; TEMPLATE_ARGS],
        header: [0; 16],
        header_len: 0,
        prefixes: [[0; 12]; TEMPLATE_ARGS],
        prefix_lens: [0; TEMPLATE_ARGS],
    };
}

/// What a TrackEvent body says: its type, name, category and arguments (with their shape).
#[derive(Clone, Copy)]
pub(super) struct EventBody<'a> {
    pub(super) kind: u64,
    pub(super) name: StringHandle,
    pub(super) category: StringHandle,
    pub(super) args: Args<'a>,
    pub(super) shape: ArgShape,
}

impl<'a> EventBody<'a> {
    /// A slice's BEGIN.
    pub(super) fn begin(slice: &Slice<'a>) -> EventBody<'a> {
        let Slice { name, category, args, shape, .. } = *slice;
        EventBody { kind: TYPE_SLICE_BEGIN, name, category, args, shape }
    }

    /// An instant (no promise about its arguments).
    pub(super) fn instant(instant: &Instant<'a>) -> EventBody<'a> {
        let Instant { name, category, args, .. } = *instant;
        EventBody { kind: TYPE_INSTANT, name, category, args, shape: ArgShape::NONE }
    }
}

/// The template slot of events named `name`.
#[inline(always)]
fn template_slot(kind: u64, name: StringHandle) -> usize {
    (name.index() ^ (kind as usize) << 3) % TEMPLATE_SLOTS
}

/// Which kind of varint value an argument has (its annotation field); None for the values a
/// template does not write (doubles, strings, arrays).
#[inline(always)]
fn value_code(value: &ArgValue<'_>) -> Option<u8> {
    match value {
        ArgValue::Int(_) => Some(0),
        ArgValue::UInt(_) => Some(1),
        ArgValue::Bool(_) => Some(2),
        ArgValue::Hex(_) => Some(3),
        ArgValue::Interned(_) => Some(4),
        ArgValue::Double(_) | ArgValue::Str(_) | ArgValue::UInts(_) => None,
    }
}

/// The interned tables. Each has its own iid space (as in Perfetto's `InternedData`), so an
/// event name's iid stays one byte however many paths were interned before it.
#[derive(Clone, Copy)]
pub(super) enum Table {
    Name = 0,
    Category = 1,
    AnnotationName = 2,
    StringValue = 3,
}

impl Table {
    pub(super) fn field(self) -> u32 {
        match self {
            Table::Name => INTERNED_EVENT_NAMES,
            Table::Category => INTERNED_CATEGORIES,
            Table::AnnotationName => INTERNED_ANNOTATION_NAMES,
            Table::StringValue => INTERNED_STRING_VALUES,
        }
    }
}

/// Which iids of each table a sequence has interned: bit sets, as iids are dense. The first
/// 64 of each table (every name, category and key of most runs) live inline.
#[derive(Default)]
pub(super) struct Interned {
    pub(super) low: [u64; 4],
    pub(super) high: [Vec<u64>; 4],
}

impl Interned {
    /// Whether `iid` is marked.
    #[inline]
    pub(super) fn contains(&self, table: Table, iid: u32) -> bool {
        if iid < 64 {
            self.low[table as usize] & 1 << iid != 0
        } else {
            let word = (iid / 64 - 1) as usize;
            self.high[table as usize].get(word).is_some_and(|w| w & 1 << (iid % 64) != 0)
        }
    }

    pub(super) fn insert(&mut self, table: Table, iid: u32) {
        if iid < 64 {
            self.low[table as usize] |= 1 << iid;
        } else {
            let (word, bits) = ((iid / 64 - 1) as usize, &mut self.high[table as usize]);
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            bits[word] |= 1 << (iid % 64);
        }
    }
}

impl<W: TraceOutput> PerfettoWriter<W> {
    /// The annotation-name id of `key`.
    #[inline(always)]
    pub(super) fn annotation_id(&mut self, key: &'static str) -> u32 {
        let address = (key.as_ptr() as usize, key.len());
        // Keys are string literals, a few bytes apart: a multiplicative hash spreads them.
        let slot = ((address.0 ^ address.1 << 48) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58;
        let slot = slot as usize % ANNOTATION_CACHE_SLOTS;
        if self.annotation_cache[slot].0 == address {
            return self.annotation_cache[slot].1;
        }
        self.annotation_id_slow(key, slot)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn annotation_id_slow(&mut self, key: &'static str, slot: usize) -> u32 {
        let address = (key.as_ptr() as usize, key.len());
        if let Some(&id) = self.annotation_ids.get(&address) {
            self.annotation_cache[slot] = (address, id);
            return id;
        }
        // The same text at another address (another call site) keeps one id.
        let next = self.annotation_names.len() as u32;
        let id = *self.annotation_by_text.entry(key).or_insert(next);
        if id == next {
            self.annotation_names.push(key);
            self.iids[Table::AnnotationName as usize].push(0);
        }
        self.annotation_ids.insert(address, id);
        self.annotation_cache[slot] = (address, id);
        id
    }

    /// Interns `key` of `table` on the sequence (adding it to the pending `InternedData`), and
    /// returns its iid.
    #[inline(always)]
    pub(super) fn intern(&mut self, index: usize, table: Table, key: usize) -> u64 {
        let iid = self.iids[table as usize][key];
        if iid == 0 || !self.sequences[index].interned.contains(table, iid) {
            return self.intern_new(index, table, key);
        }
        iid.into()
    }

    /// [`Self::intern`] of a key new to the sequence (or to the trace).
    #[cold]
    #[inline(never)]
    pub(super) fn intern_new(&mut self, index: usize, table: Table, key: usize) -> u64 {
        let slot = &mut self.iids[table as usize][key];
        if *slot == 0 {
            self.last_iid[table as usize] += 1;
            *slot = self.last_iid[table as usize];
        }
        let iid = *slot;
        self.sequences[index].interned.insert(table, iid);
        let text: &str = match table {
            Table::AnnotationName => self.annotation_names[key],
            _ => &self.strings[key],
        };
        put_message(&mut self.interned, table.field(), |m| {
            put_uint(m, INTERNED_IID, iid.into());
            put_bytes(m, INTERNED_NAME, text.as_bytes());
        });
        iid.into()
    }

    /// Appends the TrackEvent body of a slice's BEGIN or of an instant to `body`: from the
    /// sequence's template for events like it when it has one, else field by field (and makes
    /// a template of it).
    #[inline]
    pub(super) fn encode(&mut self, index: usize, event: EventBody<'_>, body: &mut Vec<u8>) {
        if !self.encode_from_template(index, event, body) {
            self.encode_fields(index, event, body);
            self.make_template(index, event);
        }
    }

    /// [`Self::encode`] from a template; false (having done nothing) if there is none for
    /// this event.
    #[inline(always)]
    fn encode_from_template(&mut self, index: usize, event: EventBody<'_>, body: &mut Vec<u8>) -> bool {
        let EventBody { kind, name, category, args, shape } = event;
        let slot = template_slot(kind, name);
        let Some(t) = self.sequences[index].templates.get(slot) else {
            return false;
        };
        if t.len as usize != args.len()
            || t.name as usize != name.index()
            || t.category as usize != category.index()
            || t.kind != kind
        {
            return false;
        }
        // Keys and value types: promised by the shape, else compared.
        if shape == ArgShape::NONE || shape != t.shape {
            for (i, (key, value)) in args.iter().enumerate() {
                if !std::ptr::eq(*key, t.keys[i]) || value_code(value) != Some(t.codes[i]) {
                    return false;
                }
            }
        }
        // The values (interning the interned ones: keys, name and category are already).
        let mut values = [0u64; TEMPLATE_ARGS];
        for (v, (_, value)) in values.iter_mut().zip(args) {
            *v = match *value {
                ArgValue::Int(v) => v as u64,
                ArgValue::UInt(v) | ArgValue::Hex(v) => v,
                ArgValue::Bool(v) => v.into(),
                ArgValue::Interned(handle) => self.intern(index, Table::StringValue, handle.index()),
                ArgValue::Double(_) | ArgValue::Str(_) | ArgValue::UInts(_) => 0,
            };
        }
        let t = &self.sequences[index].templates[slot];
        let max = t.header.len() + args.len() * (12 + 10);
        append(body, max, |w| {
            w.bytes_padded(&t.header, t.header_len.into());
            // Indexed: three zipped iterators with a `take` cost ~37 instructions an event.
            #[allow(clippy::needless_range_loop)]
            for i in 0..args.len().min(TEMPLATE_ARGS) {
                w.varint_message(&t.prefixes[i], t.prefix_lens[i].into(), values[i], &[]);
            }
        });
        true
    }

    /// Makes a template of an event just encoded field by field, if a template can write it.
    #[cold]
    #[inline(never)]
    fn make_template(&mut self, index: usize, event: EventBody<'_>) {
        let EventBody { kind, name, category, args, shape } = event;
        if args.len() > TEMPLATE_ARGS || kind >= 0x80 {
            return;
        }
        let mut t = Template::EMPTY;
        (t.kind, t.name, t.category, t.shape, t.len) =
            (kind, name.index() as u32, category.index() as u32, shape, args.len() as u8);
        // Everything it names is interned on the sequence now: these only look iids up.
        let (name, category) = (
            self.intern(index, Table::Name, name.index()),
            self.intern(index, Table::Category, category.index()),
        );
        let mut header = Vec::with_capacity(16);
        put_uint(&mut header, EVENT_TYPE, kind);
        put_uint(&mut header, EVENT_NAME_IID, name);
        put_uint(&mut header, EVENT_CATEGORY_IIDS, category);
        t.header_len = header.len() as u8;
        t.header[..header.len()].copy_from_slice(&header);
        for (i, &(key, value)) in args.iter().enumerate() {
            let Some(code) = value_code(&value) else { return };
            let field = match value {
                ArgValue::Int(_) => ANNOTATION_INT,
                ArgValue::UInt(_) => ANNOTATION_UINT,
                ArgValue::Bool(_) => ANNOTATION_BOOL,
                ArgValue::Hex(_) => ANNOTATION_POINTER,
                _ => ANNOTATION_STRING_IID,
            };
            let id = self.annotation_id(key) as usize;
            let iid = self.intern(index, Table::AnnotationName, id);
            let mut prefix = Vec::with_capacity(12);
            prefix.extend_from_slice(&[(EVENT_DEBUG_ANNOTATIONS << 3 | LEN) as u8, 0]);
            put_uint(&mut prefix, ANNOTATION_NAME_IID, iid);
            put_tag(&mut prefix, field, VARINT);
            t.keys[i] = key;
            t.codes[i] = code;
            t.prefix_lens[i] = prefix.len() as u8;
            t.prefixes[i][..prefix.len()].copy_from_slice(&prefix);
        }
        let templates = &mut self.sequences[index].templates;
        if templates.is_empty() {
            templates.resize(TEMPLATE_SLOTS, Template::EMPTY);
        }
        templates[template_slot(kind, StringHandle::from_index(t.name as usize))] = t;
    }

    /// [`Self::encode`] field by field.
    fn encode_fields(&mut self, index: usize, event: EventBody<'_>, body: &mut Vec<u8>) {
        let EventBody { kind, name, category, args, .. } = event;
        let name = self.intern(index, Table::Name, name.index());
        let category = self.intern(index, Table::Category, category.index());
        // Type, name and category; then the arguments, in runs of varint values written in
        // place, each other kind of value on its own.
        let mut next = 0;
        let mut header = true;
        while header || next < args.len() {
            let max = 24 + MAX_ANNOTATION * (args.len() - next);
            let other = append(body, max, |w| {
                if std::mem::take(&mut header) {
                    w.uint(EVENT_TYPE, kind);
                    w.uint(EVENT_NAME_IID, name);
                    w.uint(EVENT_CATEGORY_IIDS, category);
                }
                while let Some(&(key, value)) = args.get(next) {
                    let (field, value) = match value {
                        ArgValue::Int(v) => (ANNOTATION_INT, v as u64),
                        ArgValue::UInt(v) => (ANNOTATION_UINT, v),
                        ArgValue::Bool(v) => (ANNOTATION_BOOL, v.into()),
                        ArgValue::Hex(v) => (ANNOTATION_POINTER, v),
                        ArgValue::Interned(handle) => {
                            (ANNOTATION_STRING_IID, self.intern(index, Table::StringValue, handle.index()))
                        }
                        ArgValue::Double(_) | ArgValue::Str(_) | ArgValue::UInts(_) => {
                            return Some((key, value));
                        }
                    };
                    let key = self.annotation_id(key) as usize;
                    let key = self.intern(index, Table::AnnotationName, key);
                    let at = w.open_short(EVENT_DEBUG_ANNOTATIONS);
                    w.uint(ANNOTATION_NAME_IID, key);
                    w.uint(field, value);
                    w.close_short(at);
                    next += 1;
                }
                None
            });
            if let Some((key, value)) = other {
                let key = self.annotation_id(key) as usize;
                let key = self.intern(index, Table::AnnotationName, key);
                put_message(body, EVENT_DEBUG_ANNOTATIONS, |a| {
                    put_uint(a, ANNOTATION_NAME_IID, key);
                    annotation_value(a, value);
                });
                next += 1;
            }
        }
    }

    /// Encodes an event into the sequence's arena; returns where its body starts.
    pub(super) fn encode_pending(&mut self, index: usize, event: EventBody<'_>) -> usize {
        let mut arena = std::mem::take(&mut self.sequences[index].arena);
        let from = arena.len();
        self.encode(index, event, &mut arena);
        self.sequences[index].arena = arena;
        from
    }

    /// Writes the `InternedData` the event being built needs, before it.
    pub(super) fn write_interned(&mut self, index: usize) {
        if !self.interned.is_empty() {
            let id = self.sequences[index].id;
            let interned = std::mem::take(&mut self.interned);
            self.output.packet(id, |p| put_bytes(p, PACKET_INTERNED_DATA, &interned));
            self.interned = interned;
        }
    }
}

/// The value fields of a debug annotation whose value is not a varint.
pub(super) fn annotation_value(a: &mut Vec<u8>, value: ArgValue<'_>) {
    match value {
        ArgValue::Int(v) => put_uint(a, ANNOTATION_INT, v as u64),
        ArgValue::UInt(v) => put_uint(a, ANNOTATION_UINT, v),
        ArgValue::Double(v) => put_fixed64(a, ANNOTATION_DOUBLE, v.to_bits()),
        ArgValue::Bool(v) => put_uint(a, ANNOTATION_BOOL, v.into()),
        ArgValue::Str(s) => put_bytes(a, ANNOTATION_STRING, s.as_bytes()),
        ArgValue::Interned(_) => unreachable!("interned values are written by put_annotation"),
        ArgValue::Hex(v) => put_uint(a, ANNOTATION_POINTER, v),
        ArgValue::UInts(values) => {
            for &v in values {
                put_message(a, ANNOTATION_ARRAY, |e| put_uint(e, ANNOTATION_UINT, v));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::perfetto::PerfettoWriter;
    use crate::{ArgShape, ArgValue, Slice, TraceWriter};

    /// Slices of one name with two argument shapes (a call that succeeded, one that failed),
    /// interleaved: given with their shapes or without, the same bytes.
    #[test]
    fn a_shape_changes_the_work_not_the_trace() {
        fn trace(shaped: bool) -> Vec<u8> {
            let mut w = PerfettoWriter::new(Vec::new(), false).unwrap();
            let process = w.process(1, Some("p")).unwrap();
            let thread = w.thread(process, 2, None).unwrap();
            let (name, category) = (TraceWriter::intern(&mut w, "read"), TraceWriter::intern(&mut w, "io"));
            for i in 0..300u64 {
                let ok = [("fd", ArgValue::Int(3)), ("ret", ArgValue::Int(i as i64))];
                let failed =
                    [("fd", ArgValue::Int(3)), ("ret", ArgValue::Int(-1)), ("errno", ArgValue::Int(9))];
                let (args, shape) =
                    if i % 3 == 0 { (&failed[..], ArgShape(2)) } else { (&ok[..], ArgShape(1)) };
                let shape = if shaped { shape } else { ArgShape::NONE };
                let slice =
                    Slice { start_ns: 100 * i, dur_ns: 50, name, category, args, shape, outermost: true };
                w.slice(thread, &slice).unwrap();
            }
            w.finish().unwrap()
        }
        let shaped = trace(true);
        assert!(shaped.len() > 300 * 20);
        assert_eq!(shaped, trace(false));
    }
}
