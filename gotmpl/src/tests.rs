//! Unit tests of the engine through the public API.

use crate::{Options, TemplateError, parse};

fn render(t: &str, inputs: serde_json::Value) -> Result<String, TemplateError> {
    parse("resourceset", t, &Options::default())?.render(Some(&inputs))
}

#[test]
fn renders_inputs_and_pipelines() {
    let out = render(
        "<< inputs.app.version | quote >>-<< inputs.n | int >>",
        serde_json::json!({"app": {"version": "6.7.x"}, "n": "3"}),
    );
    assert_eq!(out.unwrap(), "\"6.7.x\"-3");
}

#[test]
fn missing_key_error_text() {
    let err = render("a\n  << inputs.semver >>", serde_json::json!({})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "template: resourceset:2:5: executing \"resourceset\" at <inputs>: map has no entry for key \"semver\""
    );
}

#[test]
fn parse_error_text() {
    let err = parse("resourceset", "x\n<< inputs } >>", &Options::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "template: resourceset:2: unexpected \"}\" in operand"
    );
    let err = parse("resourceset", "<< nope >>", &Options::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "template: resourceset:1: function \"nope\" not defined"
    );
}

#[test]
fn range_map_sorted_and_else() {
    let out = render(
        "<< range $k, $v := inputs >><< $k >>=<< $v >>;<< end >><< range inputs.none >><< else >>E<< end >>",
        serde_json::json!({"b": 1, "a": 2, "none": []}),
    );
    assert_eq!(out.unwrap(), "a=2;b=1;none=[];E");
}

#[test]
fn custom_delimiters_and_missingkey_default() {
    let opts = Options {
        left: "{{".into(),
        right: "}}".into(),
        missing_key_error: false,
        ..Options::default()
    };
    let t = parse("t", "{{ inputs.x }}|{{- \" y \" -}}|", &opts).unwrap();
    assert_eq!(
        t.render(Some(&serde_json::json!({}))).unwrap(),
        "<no value>| y |"
    );
}

#[test]
fn template_is_send_sync_and_reusable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<crate::Template>();
    let t = parse("r", "<< inputs.a >>", &Options::default()).unwrap();
    assert_eq!(t.render(Some(&serde_json::json!({"a": 1}))).unwrap(), "1");
    assert_eq!(t.render(Some(&serde_json::json!({"a": "x"}))).unwrap(), "x");
    assert!(t.render(None).is_err());
}

#[test]
fn to_yaml_sequences_not_indented() {
    let out = render(
        "<< toYaml inputs >>",
        serde_json::json!({"k": ["a", {"b": 1, "c": "true"}], "m": {"x": 1.5}}),
    );
    assert_eq!(
        out.unwrap(),
        "k:\n- a\n- b: 1\n  c: \"true\"\nm:\n  x: 1.5\n"
    );
}

#[test]
fn to_json_is_go_style() {
    let out = render(
        "<< toJson inputs >>",
        serde_json::json!({"b": "<&>", "a": 1e21, "c": 2}),
    );
    assert_eq!(
        out.unwrap(),
        r#"{"a":1e+21,"b":"\u003c\u0026\u003e","c":2}"#
    );
}

#[test]
fn date_functions_unsupported() {
    let err = render("<< ago 1 >>", serde_json::json!({})).unwrap_err();
    assert!(err.to_string().contains("not supported"), "{err}");
}

#[test]
fn json_to_yaml_for_resource_templates() {
    let item = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "cm-<< inputs.id >>"}, "data": {"x": 1.0}});
    let text = crate::json_to_yaml(&item).unwrap();
    assert_eq!(
        text,
        "data:\n  x: 1\nkind: ConfigMap\nmetadata:\n  name: cm-<< inputs.id >>\n"
    );
    let out = parse("resourceset", &text, &Options::default())
        .unwrap()
        .render(Some(&serde_json::json!({"id": "7"})));
    assert!(out.unwrap().contains("name: cm-7"));
}
