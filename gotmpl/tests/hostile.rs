//! Hostile templates: each must end in an error naming the limit, quickly, without a panic,
//! a hang or unbounded memory.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rflux_gotmpl::{Options, parse};

fn must_fail(name: &str, template: &str, want: &str) {
    let start = Instant::now();
    let r = parse("resourceset", template, &Options::default())
        .and_then(|t| t.render(Some(&serde_json::json!({}))));
    let took = start.elapsed();
    let err = match r {
        Ok(out) => panic!("{name}: rendered {} bytes instead of failing", out.len()),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(want),
        "{name}: error {err:?} does not mention {want:?}"
    );
    // 1 s in optimized builds; unoptimized test builds on a loaded machine get headroom.
    let limit = if cfg!(debug_assertions) {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(1)
    };
    assert!(took < limit, "{name}: took {took:?}");
}

#[test]
fn huge_range_until() {
    must_fail(
        "range until",
        "<< range until 1000000000 >>x<< end >>",
        "exceeded maximum",
    );
    must_fail(
        "untilStep",
        "<< untilStep 0 9000000000000000000 1 >>",
        "exceeded maximum output size",
    );
    must_fail(
        "seq",
        "<< seq 1 1000000000 >>",
        "exceeded maximum output size",
    );
}

#[test]
fn huge_repeat_and_friends() {
    must_fail(
        "repeat",
        "<< repeat 1000000000 \"x\" >>",
        "exceeded maximum output size",
    );
    must_fail(
        "indent",
        "<< indent 1000000000 \"x\" >>",
        "exceeded maximum output size",
    );
    must_fail(
        "printf width",
        "<< printf \"%1000000000d\" 1 >>",
        "exceeded maximum output size",
    );
    must_fail(
        "doubling",
        "<< $x := \"xxxxxxxx\" >><< range 64 >><< $x = print $x $x >><< end >>",
        "exceeded maximum",
    );
    must_fail(
        "output",
        "<< range 100000000 >><< \"0123456789abcdef\" >><< end >>",
        "exceeded maximum",
    );
    must_fail(
        "replace",
        "<< $x := repeat 1000000 \"a\" >><< replace \"a\" (repeat 100 \"b\") $x >>",
        "exceeded maximum output size",
    );
}

#[test]
fn endless_range_hits_step_limit() {
    must_fail(
        "range int",
        "<< range 1000000000000 >><< $x := 1 >><< end >>",
        "exceeded maximum evaluation steps",
    );
}

#[test]
fn deep_nesting() {
    let ifs = "<< if 1 >>".repeat(5000) + &"<< end >>".repeat(5000);
    must_fail("nested if", &ifs, "max expression depth exceeded");
    let parens = format!("<< {}1{} >>", "(".repeat(5000), ")".repeat(5000));
    must_fail("nested parens", &parens, "max expression depth exceeded");
}

#[test]
fn recursive_template() {
    must_fail(
        "recursion",
        "<< define \"r\" >><< template \"r\" . >><< end >><< template \"r\" . >>",
        "exceeded maximum template depth",
    );
    // Deep templates with deep control nesting inside each call.
    let body = "<< if 1 >>".repeat(90) + "<< template \"r\" . >>" + &"<< end >>".repeat(90);
    let t = format!("<< define \"r\" >>{body}<< end >><< template \"r\" . >>");
    must_fail("recursion with nesting", &t, "exceeded maximum");
}

#[test]
fn giant_regex() {
    must_fail(
        "regex size",
        "<< mustRegexMatch \"((a{1000}){1000}){1000}\" \"a\" >>",
        "error parsing regexp",
    );
    must_fail(
        "regex panic",
        "<< regexFindAll \"(x{1000}){1000}\" \"x\" -1 >>",
        "error calling regexFindAll",
    );
}

#[test]
fn cyclic_map_is_bounded() {
    must_fail(
        "json cycle",
        "<< $d := dict >><< $_ := set $d \"self\" $d >><< mustToJson $d >>",
        "cycle",
    );
}

#[test]
fn deep_and_shared_values_are_bounded() {
    // A million-deep list: dropping and printing it must not overflow the stack.
    must_fail(
        "deep list",
        "<< $l := list >><< range 1000000 >><< $l = list $l >><< end >><< mustToJson $l >>",
        "nesting deeper than 1000",
    );
    // Shared sub-values make a tree of 2^40 leaves: printing is bounded by the output limit.
    must_fail(
        "shared list",
        "<< $l := list 1 >><< range 40 >><< $l = list $l $l >><< end >><< $l >>",
        "exceeded maximum output size",
    );
    must_fail(
        "shared toJson",
        "<< $l := list 1 >><< range 40 >><< $l = list $l $l >><< end >><< mustToJson $l >>",
        "exceeded maximum output size",
    );
    must_fail(
        "shared deepEqual",
        "<< $a := list 1 >><< $b := list 1 >><< range 40 >><< $a = list $a $a >><< $b = list $b $b >><< end >><< if deepEqual $a $b >><< fail \"equal\" >><< end >><< fail \"done\" >>",
        "done",
    );
}
