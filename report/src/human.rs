//! Durations, sizes and long names as the text tables show them.

/// A duration with a unit that keeps it short: `950 ns`, `12.5 µs`, `3.2 ms`, `1.25 s`.
pub fn format_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// A size in binary units: `512 B`, `4.0 KiB`, `1.5 MiB`, `2.00 GiB`.
pub(crate) fn format_bytes(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
        _ => format!("{:.2} GiB", bytes as f64 / 1_073_741_824.0),
    }
}

/// `text` cut to `max` characters (not bytes: names are UTF-8), with `…` marking the cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_switch_at_powers_of_1000_and_1024() {
        assert_eq!(format_ns(999), "999 ns");
        assert_eq!(format_ns(1_500), "1.5 µs");
        assert_eq!(format_ns(2_000_000_000), "2.00 s");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1_572_864), "1.5 MiB");
    }

    #[test]
    fn truncate_counts_characters() {
        assert_eq!(truncate("ééé", 3), "ééé");
        assert_eq!(truncate("éééé", 3), "éé…");
    }
}
