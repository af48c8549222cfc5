//! The docs that name code must match it: docs/performance.md's numbered pass list is the
//! session pipeline, in order.

use std::path::Path;

/// The `N. \`name\`` entries of the "## Graph passes" section, in their numbered order.
fn documented_passes(text: &str) -> Vec<(usize, String)> {
    let start = text
        .find("## Graph passes")
        .expect("docs/performance.md has a '## Graph passes' section");
    let section = &text[start + 2..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut found = Vec::new();
    let bytes = section.as_bytes();
    for (i, _) in section.match_indices(". `") {
        // The number right before ". `".
        let digits = section[..i]
            .bytes()
            .rev()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits == 0 {
            continue;
        }
        // A list number starts a line or follows ", " (several passes in one item).
        let before = i - digits;
        if before > 0 && !matches!(bytes[before - 1], b'\n' | b' ') {
            continue;
        }
        let n: usize = section[before..i].parse().expect("digits");
        let rest = &section[i + 3..];
        let Some(end) = rest.find('`') else { continue };
        found.push((n, rest[..end].to_string()));
    }
    found
}

#[test]
fn performance_md_lists_the_pipeline_in_order() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/performance.md");
    let text = std::fs::read_to_string(&path).expect("docs/performance.md");
    let documented = documented_passes(&text);
    let numbers: Vec<usize> = documented.iter().map(|(n, _)| *n).collect();
    let expected_numbers: Vec<usize> = (1..=documented.len()).collect();
    assert_eq!(numbers, expected_numbers, "numbered 1, 2, 3, ... in order");
    let names: Vec<&str> = documented.iter().map(|(_, s)| s.as_str()).collect();
    let pipeline: Vec<&str> = ferrolite::pass_names().iter().map(|p| p.0).collect();
    assert_eq!(
        names, pipeline,
        "docs/performance.md's pass list differs from the session pipeline"
    );
}

#[test]
fn the_parser_sees_a_missing_or_reordered_pass() {
    let doc = "## Graph passes\n\n1. `a`: x.\n2. `b`, 3. `c`: y.\n\n## Next\n4. `d`: z.\n";
    let got = documented_passes(doc);
    let names: Vec<&str> = got.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
}
