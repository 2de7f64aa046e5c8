#![allow(clippy::unwrap_used)]

use super::*;

/// `(JSON, sigs.k8s.io/yaml v1.6.0 Marshal of it)`, recorded with the Go library on the value
/// decoded by `encoding/json` (so integers beyond 2^53 are rounded first, as the controller's
/// export does; [`to_yaml`] is given the already rounded values below).
const CASES: &[(&str, &str)] = &[
    (
        r#"[{"id":"123456","env":"staging"}]"#,
        "- env: staging\n  id: \"123456\"\n",
    ),
    (r#"[]"#, "[]\n"),
    (
        r#"[{"a":1,"b":1.5,"c":true,"d":null,"e":"","f":[],"g":{}}]"#,
        "- a: 1\n  b: 1.5\n  c: true\n  d: null\n  e: \"\"\n  f: []\n  g: {}\n",
    ),
    (
        r#"[{"s":"yes","t":"no","u":"on","v":"~","w":"null","x":"1e3","y":"0x1F","z":"012","dot":".5","neg":"-1","plus":"+1","ts":"2024-01-02","ts2":"2024-1-2 10:20:30","b60":"1:20","v1":"v1.2.3","under":"1_000"}]"#,
        "- b60: \"1:20\"\n  dot: \".5\"\n  neg: \"-1\"\n  plus: \"+1\"\n  s: \"yes\"\n  t: \"no\"\n  ts: \"2024-01-02\"\n  ts2: \"2024-1-2 10:20:30\"\n  u: \"on\"\n  under: \"1_000\"\n  v: \"~\"\n  v1: v1.2.3\n  w: \"null\"\n  x: \"1e3\"\n  \"y\": \"0x1F\"\n  z: \"012\"\n",
    ),
    (
        r#"[{"colon":"a: b","hash":"a #b","lead":" x","trail":"x ","dash":"- x","dash2":"-x","q":"?x","q2":"? x","star":"*x","amp":"&x","bang":"!x","pct":"%x","at":"@x","tick":"`x","sq":"'x","dq":"\"x","brace":"{x","url":"http://x:80/y","docs":"---x","dots":"...x","apos":"it's"}]"#,
        "- amp: '&x'\n  apos: it's\n  at: '@x'\n  bang: '!x'\n  brace: '{x'\n  colon: 'a: b'\n  dash: '- x'\n  dash2: -x\n  docs: '---x'\n  dots: '...x'\n  dq: '\"x'\n  hash: 'a #b'\n  lead: ' x'\n  pct: '%x'\n  q: ?x\n  q2: '? x'\n  sq: '''x'\n  star: '*x'\n  tick: '`x'\n  trail: 'x '\n  url: http://x:80/y\n",
    ),
    (
        r#"[{"multi": "line1\nline2", "multi2": "line1\nline2\n", "multi3": "a\n\n", "sp": " lead\nx", "tab": "a\tb", "ctl": "a\u0001b", "uni": "héllo wörld", "nbsp": "a b"}]"#,
        "- ctl: \"a\\x01b\"\n  multi: |-\n    line1\n    line2\n  multi2: |\n    line1\n    line2\n  multi3: |+\n    a\n\n  nbsp: a b\n  sp: |2-\n     lead\n    x\n  tab: \"a\\tb\"\n  uni: héllo wörld\n",
    ),
    (
        r#"[{"long":"word word word word word word word word word word word word word word word word word word word word word word word word"}]"#,
        "- long: word word word word word word word word word word word word word word word\n    word word word word word word word word word\n",
    ),
    (
        r#"[{"longq":"'word word word word word word word word word word word word word word word word word word word word word word word word"}]"#,
        "- longq: '''word word word word word word word word word word word word word word\n    word word word word word word word word word word'\n",
    ),
    (
        r#"[{"longd":"true word word word word word word word word word word word word word word word word word word word word word word word\u0001"}]"#,
        "- longd: \"true word word word word word word word word word word word word word word\n    word word word word word word word word word\\x01\"\n",
    ),
    (
        r#"[{"nested":{"z":1,"a":{"k":[1,2,{"x":"y","a":[]}]},"list":[[1,2],[3,[4,5]],{"m":"n"}]}}]"#,
        "- nested:\n    a:\n      k:\n      - 1\n      - 2\n      - a: []\n        x: \"y\"\n    list:\n    - - 1\n      - 2\n    - - 3\n      - - 4\n        - 5\n    - m: \"n\"\n    z: 1\n",
    ),
    (
        r#"[{"a10":1,"a9":2,"a1":3,"B":4,"b":5,"_x":6,"1":7,"10":8,"2":9,"Z":13,"é":14,"a0":15,"a00":16}]"#,
        "- _x: 6\n  \"1\": 7\n  \"2\": 9\n  \"10\": 8\n  B: 4\n  Z: 13\n  a0: 15\n  a00: 16\n  a1: 3\n  a9: 2\n  a10: 1\n  b: 5\n  é: 14\n",
    ),
    (
        r#"[{"f1":1234567.5,"f2":0.000001,"f3":0.0001,"f4":1e21,"f5":1e20,"f6":100000.5,"f7":-2.5e-7,"i1":9007199254740993,"i2":-42,"f8":3.0,"f9":123456.0}]"#,
        "- f1: 1.2345675e+06\n  f2: 1e-06\n  f3: 0.0001\n  f4: 1e+21\n  f5: 1e+20\n  f6: 100000.5\n  f7: -2.5e-07\n  f8: 3\n  f9: 123456\n  i1: 9007199254740992\n  i2: -42\n",
    ),
    (
        r#"[{"id":"1"},{"id":"2","x":{"y":"z"}}]"#,
        "- id: \"1\"\n- id: \"2\"\n  x:\n    \"y\": z\n",
    ),
    (
        r#"[{"k":["a","b"],"e":[],"m":[{"a":1,"b":2},{"c":3}]}]"#,
        "- e: []\n  k:\n  - a\n  - b\n  m:\n  - a: 1\n    b: 2\n  - c: 3\n",
    ),
];

#[test]
fn output_matches_sigs_yaml() {
    for (json, want) in CASES {
        let mut v: Value = serde_json::from_str(json).unwrap();
        crate::provider::revision::normalize_numbers(&mut v);
        assert_eq!(to_yaml(&v).unwrap(), *want, "{json}");
    }
}

#[test]
fn depth_is_bounded() {
    let mut v = Value::Null;
    for _ in 0..2_000 {
        v = Value::Array(vec![v]);
    }
    assert!(matches!(to_yaml(&v), Err(YamlError::Printer(_))));
}

#[test]
fn key_order_is_natural() {
    let keys = ["a10", "a9", "a1", "B", "b", "_x", "1", "10", "2"];
    let obj: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| (k.to_string(), Value::Bool(true)))
        .collect();
    let text = to_yaml(&Value::Object(obj)).unwrap();
    let order: Vec<&str> = text
        .lines()
        .map(|l| l.split(':').next().unwrap().trim_matches('"'))
        .collect();
    assert_eq!(order, ["_x", "1", "2", "10", "B", "a1", "a9", "a10", "b"]);
}
