//! Op shapes (`mlprof-collect --torch-shapes`): which input shapes and dtypes each PyTorch op
//! ran with.
//!
//! PyTorch's ITT op ranges carry a name only. The `--torch-shapes` hook (python/mlprof_torch/
//! shapes.py) sends, just before each Python-level torch call with tensor arguments, an ITT
//! marker in domain [`SHAPES_DOMAIN`] named `function|shapes|dtypes`
//! (`conv2d|[32,3,56,56];[64,3,3,3]|float32;float32`) on the calling thread. The op ranges the
//! call makes begin after the marker; the outermost begins first. So an op range (domain
//! `PyTorch`) takes a marker's shapes when it is the first op range to begin on the marker's
//! thread after the marker and their names agree (`aten::conv2d` and `conv2d`,
//! `aten::add_` and `__iadd__`). Ops issued from C++ alone (autograd's backward ops) and the
//! inner ops of a call get none. No format change: markers and their names are ordinary ITT
//! records and strings, which older readers show as markers.
//!
//! Records arrive in the order they ended: a call's marker before its ops, and the ops of a
//! call (inner ones first) before the next call's marker. [`ShapeMatcher`] therefore keeps one
//! pending marker per thread and the earliest-starting op seen after it.

use mlprof_format::func::Func;
use mlprof_format::record::IttSpan;
use mlprof_format::string_id;
use rustc_hash::FxHashMap;

use crate::run::RunMeta;

/// The ITT domain of the shape markers.
pub(crate) const SHAPES_DOMAIN: &str = "mlprof.shapes";
pub(crate) const SHAPES: u64 = string_id(SHAPES_DOMAIN.as_bytes());
/// The domain of PyTorch's op ranges (`emit_itt`).
pub(crate) const PYTORCH: u64 = string_id(b"PyTorch");

/// An op's input configuration: the tensor arguments' shapes and dtypes, `;`-separated in
/// argument order (tensors inside a list argument in place).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct OpShapes {
    /// `[32,3,56,56];[64,3,3,3]`.
    pub(crate) shapes: String,
    /// `float32;float32`.
    pub(crate) dtypes: String,
}

impl OpShapes {
    /// A marker's name `function|shapes|dtypes` as (function, shapes).
    pub(crate) fn parse(marker: &str) -> Option<(&str, OpShapes)> {
        let mut parts = marker.splitn(3, '|');
        let (function, shapes, dtypes) = (parts.next()?, parts.next()?, parts.next()?);
        (!function.is_empty() && shapes.starts_with('['))
            .then(|| (function, OpShapes { shapes: shapes.to_string(), dtypes: dtypes.to_string() }))
    }
}

/// Whether the op range `op` (`aten::conv2d`) is what the Python call `function` (`conv2d`,
/// `Tensor.__iadd__`, `F.cross_entropy` → `aten::cross_entropy_loss`) dispatched: one name is a
/// prefix of the other once the namespace and the operator dunders are taken off.
pub(crate) fn names_agree(function: &str, op: &str) -> bool {
    let op = op.rsplit("::").next().unwrap_or(op);
    if function.is_empty() || op.is_empty() {
        return false;
    }
    let agree = |f: &str| !f.is_empty() && (op.starts_with(f) || f.starts_with(op));
    let Some(dunder) = function.strip_prefix("__").and_then(|f| f.strip_suffix("__")) else {
        return agree(function);
    };
    let dunder = if dunder.ends_with("truediv") { dunder.replace("truediv", "div") } else { dunder.into() };
    // `__add__`, reflected `__radd__` (aten::add; `__rsub__` is aten::rsub), in place `__iadd__`.
    agree(&dunder)
        || dunder.strip_prefix('r').is_some_and(agree)
        || dunder.strip_prefix('i').is_some_and(|f| agree(&format!("{f}_")))
}

/// The pending marker of one thread.
struct Pending {
    time: u64,
    marker: u64,
    /// The op range that began first after the marker: (start, caller's index, name id).
    first_op: Option<(u64, usize, u64)>,
}

/// Pairs op ranges with shape markers while a run's events stream by.
#[derive(Default)]
pub(crate) struct ShapeMatcher {
    threads: FxHashMap<(u32, u32), Pending>,
    /// (op index, marker name id, op name id).
    pairs: Vec<(usize, u64, u64)>,
}

impl ShapeMatcher {
    /// Takes one ITT record: a shape marker, or an op range the caller knows as `op_index`.
    /// Anything else is ignored.
    pub(crate) fn observe(&mut self, func: Func, span: &IttSpan, op_index: usize) {
        match func {
            Func::IttMarker if span.domain == SHAPES => {
                let next = Pending { time: span.start, marker: span.name, first_op: None };
                if let Some(done) = self.threads.insert((span.pid, span.tid), next) {
                    self.settle(done);
                }
            }
            Func::IttTask if span.domain == PYTORCH => {
                if let Some(pending) = self.threads.get_mut(&(span.pid, span.tid))
                    && span.start >= pending.time
                    // An enclosing op arrives after its children and begins no later.
                    && pending.first_op.is_none_or(|(start, _, _)| span.start <= start)
                {
                    pending.first_op = Some((span.start, op_index, span.name));
                }
            }
            _ => {}
        }
    }

    fn settle(&mut self, pending: Pending) {
        if let Some((_, index, name)) = pending.first_op {
            self.pairs.push((index, pending.marker, name));
        }
    }

    /// Op index → its shapes, for the pairs whose names agree.
    pub(crate) fn resolve(mut self, meta: &RunMeta) -> FxHashMap<usize, OpShapes> {
        for (_, pending) in std::mem::take(&mut self.threads) {
            self.settle(pending);
        }
        let mut parsed: FxHashMap<u64, Option<(String, OpShapes)>> = FxHashMap::default();
        let mut ops: FxHashMap<u64, String> = FxHashMap::default();
        let mut out = FxHashMap::default();
        for (index, marker, op) in self.pairs {
            let marker = parsed.entry(marker).or_insert_with(|| {
                let name = meta.string(marker);
                OpShapes::parse(&name).map(|(function, shapes)| (function.to_string(), shapes))
            });
            let Some((function, shapes)) = marker else { continue };
            let op = ops.entry(op).or_insert_with(|| meta.string(op));
            if names_agree(function, op) {
                out.insert(index, shapes.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_names_parse() {
        let (function, shapes) = OpShapes::parse("conv2d|[32,3,56,56];[64,3,3,3]|float32;float32").unwrap();
        assert_eq!(function, "conv2d");
        assert_eq!(shapes.shapes, "[32,3,56,56];[64,3,3,3]");
        assert_eq!(shapes.dtypes, "float32;float32");
        assert_eq!(OpShapes::parse("conv2d"), None);
        assert_eq!(OpShapes::parse("|[1]|float32"), None);
    }

    #[test]
    fn python_calls_and_aten_names() {
        for (function, op) in [
            ("conv2d", "aten::conv2d"),
            ("linear", "aten::linear"),
            ("cross_entropy", "aten::cross_entropy_loss"),
            ("add_", "aten::add_"),
            ("__add__", "aten::add"),
            ("__radd__", "aten::add"),
            ("__rsub__", "aten::rsub"),
            ("__iadd__", "aten::add_"),
            ("__truediv__", "aten::div"),
            ("__itruediv__", "aten::div_"),
            ("__matmul__", "aten::matmul"),
        ] {
            assert!(names_agree(function, op), "{function} {op}");
        }
        for (function, op) in
            [("kaiming_uniform_", "aten::uniform_"), ("__getitem__", "aten::select"), ("", "x")]
        {
            assert!(!names_agree(function, op), "{function} {op}");
        }
    }

    fn span(func: Func, tid: u32, start: u64, dur: u64, name: u64, domain: u64) -> IttSpan {
        IttSpan { kind: func as u16, pid: 1, tid, start, dur, name, domain, ..Default::default() }
    }

    /// Markers and ops in the order records end: the call's outermost op takes the shapes;
    /// inner ops, ops of another thread and ops before the marker do not.
    #[test]
    fn the_first_op_after_a_marker_takes_its_shapes() {
        let mut meta = RunMeta::default();
        let mut name = |text: &str| {
            let id = string_id(text.as_bytes());
            meta.strings.insert(id, text.to_string());
            id
        };
        let (conv_marker, relu_marker) =
            (name("conv2d|[4,3,16,16];[8,3,3,3]|float32;float32"), name("relu|[4,8,16,16]|float32"));
        let (conv, convolution, relu, empty) =
            (name("aten::conv2d"), name("aten::convolution"), name("aten::relu"), name("aten::empty"));
        let mut m = ShapeMatcher::default();
        let records = [
            (0, span(Func::IttTask, 7, 0, 5, empty, PYTORCH)),
            (99, span(Func::IttMarker, 7, 10, 0, conv_marker, SHAPES)),
            (1, span(Func::IttTask, 7, 12, 6, convolution, PYTORCH)),
            (2, span(Func::IttTask, 8, 11, 1, empty, PYTORCH)),
            (3, span(Func::IttTask, 7, 11, 8, conv, PYTORCH)),
            (99, span(Func::IttMarker, 7, 30, 0, relu_marker, SHAPES)),
            (4, span(Func::IttTask, 7, 31, 2, relu, PYTORCH)),
            (99, span(Func::IttMarker, 7, 40, 0, relu_marker, SHAPES)),
            // The names disagree: no shapes.
            (5, span(Func::IttTask, 7, 41, 2, empty, PYTORCH)),
        ];
        for (index, span) in &records {
            m.observe(Func::from_id(span.kind).unwrap(), span, *index);
        }
        let found = m.resolve(&meta);
        let mut indexes: Vec<_> = found.keys().copied().collect();
        indexes.sort();
        assert_eq!(indexes, [3, 4]);
        assert_eq!(found[&3].shapes, "[4,3,16,16];[8,3,3,3]");
        assert_eq!(found[&4].dtypes, "float32");
    }
}
