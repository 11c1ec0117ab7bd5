//! The HTML report in a real browser: Debian's `chromium`, headless, with the network cut
//! (a proxy that does not exist, every host unresolvable), `--dump-dom` for the document
//! after it loaded and `--screenshot` for what it looks like; readers of the dumped DOM (the
//! report's `data-k`/`data-v` cells) and of the screenshot (a PNG decoder just big enough for
//! Chromium's 8-bit RGB/RGBA output).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{clean_env, describe, skip, try_output_with_timeout};

/// `$MLPROF_CHROMIUM`, else `/usr/bin/chromium` (scripts/system-deps.sh installs it); `None`
/// after printing a SKIPPED line when it does not run.
pub fn chromium() -> Option<PathBuf> {
    let program =
        std::env::var_os("MLPROF_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let mut c = Command::new(&program);
    clean_env(&mut c).arg("--version");
    match try_output_with_timeout(c, Duration::from_secs(60)) {
        Ok(o) if o.status.success() => Some(program),
        _ => {
            skip(format_args!(
                "needs `{}` (Debian package chromium; scripts/system-deps.sh installs it) to render the HTML report",
                program.display()
            ));
            None
        }
    }
}

/// What Chromium made of a page.
pub struct Rendered {
    /// The document after loading (`--dump-dom`).
    pub dom: String,
    /// The screenshot (`--screenshot`, 1280 px wide).
    pub png: PathBuf,
}

/// Loads `html` from `file://` twice (DOM, then a 1280×`height` screenshot into `dir`), with no
/// network: `--proxy-server` points at a closed port and every host name fails to resolve.
pub fn render(chromium: &Path, html: &Path, dir: &Path, height: u32) -> Rendered {
    let url = format!("file://{}", html.canonicalize().expect("the report file").display());
    let png = dir.join(format!("{}.png", html.file_stem().unwrap_or_default().to_string_lossy()));
    let run = |extra: &[String]| {
        let mut c = Command::new(chromium);
        clean_env(&mut c)
            .env("HOME", dir)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--proxy-server=127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", dir.join("chromium-profile").display()))
            .args(extra)
            .arg(&url);
        let o = try_output_with_timeout(c, Duration::from_secs(120)).expect("chromium runs");
        assert!(o.status.success(), "chromium {extra:?} failed\n{}", describe(&o));
        o
    };
    let dom = String::from_utf8(run(&["--dump-dom".into()]).stdout).expect("UTF-8 DOM");
    run(&[format!("--window-size=1280,{height}"), format!("--screenshot={}", png.display())]);
    assert!(png.is_file(), "no screenshot at {}", png.display());
    Rendered { dom, png }
}

/// Attribute text as it was before serialization.
pub fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The value of attribute `name` in the start tag `tag` (`<td class="num" data-k="count">`).
fn attribute(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let at = tag.find(&needle)? + needle.len();
    let end = tag[at..].find('"')?;
    Some(unescape(&tag[at..at + end]))
}

/// The start tags in `html` that carry `data-k`, as key → value (later ones win).
fn cells(html: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for piece in html.split('<').skip(1) {
        let tag = piece.split('>').next().unwrap_or("");
        if let (Some(k), Some(v)) = (attribute(tag, "data-k"), attribute(tag, "data-v")) {
            out.insert(k, v);
        }
    }
    out
}

/// The element with `id="ID"` (tag `end`) up to its matching `</end>` (nested `end`
/// elements counted); `None` when absent.
pub fn element<'a>(dom: &'a str, id: &str, end: &str) -> Option<&'a str> {
    let at = dom.find(&format!(" id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let (open, close) = (format!("<{end}"), format!("</{end}>"));
    let (mut depth, mut i) = (0usize, start);
    while i < dom.len() {
        let rest = &dom[i..];
        if rest.starts_with(&close) {
            depth -= 1;
            i += close.len();
            if depth == 0 {
                return Some(&dom[start..i]);
            }
        } else if rest.starts_with(&open) && rest[open.len()..].starts_with([' ', '>']) {
            depth += 1;
            i += open.len();
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    None
}

/// The rows of table `id`: `data-name` → (`data-k` → `data-v`); empty when there is no such
/// table.
pub fn table(dom: &str, id: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let Some(table) = element(dom, id, "table") else { return BTreeMap::new() };
    let mut out = BTreeMap::new();
    for row in table.split("<tr ").skip(1) {
        let tag = row.split('>').next().unwrap_or("");
        if let Some(name) = attribute(&format!(" {tag}"), "data-name") {
            out.insert(name, cells(row));
        }
    }
    out
}

/// The `data-k` → `data-v` pairs inside the element `id` (up to `</end>`).
pub fn figures(dom: &str, id: &str, end: &str) -> BTreeMap<String, String> {
    element(dom, id, end).map(cells).unwrap_or_default()
}

/// What a screenshot shows, roughly.
#[derive(Debug)]
pub struct PngStats {
    pub width: u32,
    pub height: u32,
    /// Distinct colors (up to 4096 counted).
    pub colors: usize,
    /// Share of the pixels that differ from the top-left one (the background).
    pub ink: f64,
}

/// Decodes an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes).
pub fn png_stats(path: &Path) -> PngStats {
    let bytes = std::fs::read(path).expect("read the PNG");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", path.display());
    let (mut at, mut idat) = (8, Vec::new());
    let (mut width, mut height, mut channels) = (0u32, 0u32, 0usize);
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(data[0..4].try_into().unwrap());
                height = u32::from_be_bytes(data[4..8].try_into().unwrap());
                assert_eq!((data[8], data[12]), (8, 0), "8-bit, non-interlaced PNG expected");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    other => panic!("PNG color type {other}: RGB or RGBA expected"),
                };
            }
            b"IDAT" => idat.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    let raw = miniz_oxide::inflate::decompress_to_vec_zlib(&idat).expect("PNG image data inflates");
    let stride = width as usize * channels;
    assert_eq!(raw.len(), (stride + 1) * height as usize, "PNG data size");
    let mut image = vec![0u8; stride * height as usize];
    for y in 0..height as usize {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= channels { image[y * stride + x - channels] } else { 0 };
            let b = if y > 0 { image[(y - 1) * stride + x] } else { 0 };
            let c = if x >= channels && y > 0 { image[(y - 1) * stride + x - channels] } else { 0 };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => {
                    let p = a as i16 + b as i16 - c as i16;
                    let (pa, pb, pc) = ((p - a as i16).abs(), (p - b as i16).abs(), (p - c as i16).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            image[y * stride + x] = line[x].wrapping_add(predicted);
        }
    }
    let background = &image[..channels];
    let mut colors = std::collections::HashSet::new();
    let mut ink = 0usize;
    for pixel in image.chunks_exact(channels) {
        if pixel != background {
            ink += 1;
        }
        if colors.len() < 4096 {
            colors.insert(pixel.to_vec());
        }
    }
    PngStats {
        width,
        height,
        colors: colors.len(),
        ink: ink as f64 / (width as f64 * height as f64).max(1.0),
    }
}
