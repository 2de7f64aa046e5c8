//! Post-build substitution: every envsubst operator, escapes, strict mode, the opt-out, the
//! `WithVariables`/`Always` strategies, type changes through YAML, and Flux's error texts.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use kustomize_controller::substitute::{
    EnvsubstError, MAX_NESTING, PostBuildError, SubstituteOptions, envsubst_map, object_id,
    strict_from_gates, substitute, substitute_with, substitution_disabled, valid_var_name,
};
use serde_json::{Value, json};

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn eval(input: &str, pairs: &[(&str, &str)]) -> String {
    envsubst_map(input, &vars(pairs), false).unwrap()
}

fn eval_strict(input: &str, pairs: &[(&str, &str)]) -> Result<String, EnvsubstError> {
    envsubst_map(input, &vars(pairs), true)
}

#[test]
fn plain_text_and_bare_dollar_are_left_alone() {
    assert_eq!(eval("abcdEFGH28ij", &[]), "abcdEFGH28ij");
    assert_eq!(eval("$var and $HOME", &[("var", "x")]), "$var and $HOME");
    assert_eq!(eval("cost: 5$", &[]), "cost: 5$");
    assert_eq!(eval("}text{", &[]), "}text{");
    assert_eq!(eval("http://github.com", &[]), "http://github.com");
    assert_eq!(eval(r"\\.\pipe\name", &[]), r"\\.\pipe\name");
}

#[test]
fn simple_and_embedded_references() {
    assert_eq!(eval("${a}", &[("a", "1")]), "1");
    assert_eq!(eval("x-${a}-${b}-y", &[("a", "1"), ("b", "2")]), "x-1-2-y");
    assert_eq!(eval("${_under_9}", &[("_under_9", "ok")]), "ok");
    // Non-strict: undefined is empty.
    assert_eq!(eval("[${nope}]", &[]), "[]");
}

#[test]
fn length_and_casing() {
    let v = [("v", "abcdEFGH28ij")];
    assert_eq!(eval("${#v}", &v), "12");
    assert_eq!(eval("${#v}", &[("v", "é")]), "2", "length counts bytes");
    assert_eq!(eval("${v^}", &v), "AbcdEFGH28ij");
    assert_eq!(eval("${v^^}", &v), "ABCDEFGH28IJ");
    let u = [("v", "ABCDEFGH28IJ")];
    assert_eq!(eval("${v,}", &u), "aBCDEFGH28IJ");
    assert_eq!(eval("${v,,}", &u), "abcdefgh28ij");
    assert_eq!(eval("${v^}", &[("v", "")]), "");
}

#[test]
fn substrings() {
    let p = [("p", "/home/bozo/ideas/thoughts.for.today")];
    assert_eq!(eval("${p:11}", &p), "ideas/thoughts.for.today");
    assert_eq!(eval("${p:11:5}", &p), "ideas");
    let s = [("s", "abcdef")];
    assert_eq!(eval("${s:-2}", &s), "abcdef", ":- is the default operator");
    assert_eq!(eval("${s:1:-1}", &s), "bcde");
    assert_eq!(eval("${s:4:100}", &s), "ef");
    assert_eq!(eval("${s:10}", &s), "");
    assert_eq!(eval("${s:10:2}", &s), "");
    assert_eq!(
        eval("${s:x}", &s),
        "abcdef",
        "a non-numeric position keeps the value"
    );
    assert_eq!(eval("${s:1:y}", &s), "abcdef");
    assert_eq!(eval("${s:4:-3}", &s), "", "end before start is empty");
    // Position and length may come from variables.
    assert_eq!(
        eval("${s:${a}:${b}}", &[("s", "abcdef"), ("a", "2"), ("b", "3")]),
        "cde"
    );
}

#[test]
fn prefix_and_suffix_removal_with_globs() {
    let f = [("f", "bash.string.txt")];
    assert_eq!(eval("${f#*.}", &f), "string.txt");
    assert_eq!(eval("${f##*.}", &f), "txt");
    assert_eq!(eval("${f%.*}", &f), "bash.string");
    assert_eq!(eval("${f%%.*}", &f), "bash");
    // `*` also matches `/`.
    let p = [("p", "path/to/file")];
    assert_eq!(eval("${p#*/}", &p), "to/file");
    assert_eq!(eval("${p##*/}", &p), "file");
    assert_eq!(eval("${p%/*}", &p), "path/to");
    assert_eq!(eval("${p%%/*}", &p), "path");
    // Literal, `?` and class patterns; no match keeps the value.
    assert_eq!(eval("${f#bash.}", &f), "string.txt");
    assert_eq!(eval("${f#?a}", &f), "sh.string.txt");
    assert_eq!(eval("${f%[a-z][a-z][a-z]}", &f), "bash.string.");
    assert_eq!(eval("${f#nomatch}", &f), "bash.string.txt");
    // A malformed pattern keeps the value.
    assert_eq!(eval("${f#[a}", &f), "bash.string.txt");
}

#[test]
fn replacements() {
    let z = [("z", "abcABC123ABCabc")];
    assert_eq!(eval("${z/abc/xyz}", &z), "xyzABC123ABCabc");
    assert_eq!(eval("${z//abc/xyz}", &z), "xyzABC123ABCxyz");
    assert_eq!(eval("${z/#abc/XYZ}", &z), "XYZABC123ABCabc");
    assert_eq!(eval("${z/%abc/XYZ}", &z), "abcABC123ABCXYZ");
    assert_eq!(eval("${z/#ABC/XYZ}", &z), "abcABC123ABCabc", "not a prefix");
    assert_eq!(eval("${z/%ABC/XYZ}", &z), "abcABC123ABCabc", "not a suffix");
    assert_eq!(eval("${v/#/prefix-}", &[("v", "val")]), "prefix-val");
    assert_eq!(eval("${v/%/-suffix}", &[("v", "val")]), "val-suffix");
    assert_eq!(eval("${v/./}", &[("v", "foo.bar")]), "foobar");
    assert_eq!(eval("${v//./}", &[("v", "a.b.c")]), "abc");
    // Escaped slashes and backslashes.
    assert_eq!(eval(r"${v/\//-}", &[("v", "foo/bar")]), "foo-bar");
    assert_eq!(eval(r"${v//\//-}", &[("v", "foo/bar/baz")]), "foo-bar-baz");
    assert_eq!(eval(r"${v//-/\\}", &[("v", "a-b")]), r"a\b");
    // Pattern and replacement from variables.
    assert_eq!(
        eval("${v//${p}/${r}}", &[("v", "a.b.c"), ("p", "."), ("r", "_")]),
        "a_b_c"
    );
}

#[test]
fn default_operators() {
    for op in [":-", ":=", "=", ":+", ":?"] {
        assert_eq!(eval(&format!("${{v{op}dflt}}"), &[]), "dflt", "{op} unset");
        assert_eq!(
            eval(&format!("${{v{op}dflt}}"), &[("v", "")]),
            "dflt",
            "{op} empty"
        );
        assert_eq!(
            eval(&format!("${{v{op}dflt}}"), &[("v", "set")]),
            "set",
            "{op} set"
        );
    }
    assert_eq!(eval("${v:-}", &[]), "");
    // Nested defaults and text around nested references.
    assert_eq!(
        eval("something ${v=${d}}", &[("d", "foo")]),
        "something foo"
    );
    assert_eq!(eval("${v=${d}-suffix}", &[("d", "foo1")]), "foo1-suffix");
    assert_eq!(
        eval("${v=prefix${d}-suffix}", &[("d", "foo1")]),
        "prefixfoo1-suffix"
    );
    assert_eq!(eval("${v=${w^^}}", &[("w", "abc")]), "ABC");
    // A default may contain `$` and `:` literally.
    assert_eq!(eval("${v:-$HOME:80}", &[]), "$HOME:80");
}

#[test]
fn unsupported_forms_fail_like_flux() {
    assert_eq!(
        eval_strict("${v-d}", &[("v", "x")]),
        Err(EnvsubstError::MissingClosingBrace)
    );
    assert_eq!(
        eval_strict("${v+d}", &[("v", "x")]),
        Err(EnvsubstError::MissingClosingBrace)
    );
    assert_eq!(
        eval_strict("${}", &[]),
        Err(EnvsubstError::ParseVariableName)
    );
    assert_eq!(
        eval_strict("${-x}", &[]),
        Err(EnvsubstError::ParseVariableName)
    );
    assert_eq!(
        eval_strict("${v", &[("v", "x")]),
        Err(EnvsubstError::MissingClosingBrace)
    );
    assert_eq!(
        eval_strict("${#}", &[]),
        Err(EnvsubstError::BadSubstitution)
    );
    assert_eq!(
        eval_strict("${v^^^}", &[("v", "x")]),
        Err(EnvsubstError::BadSubstitution)
    );
    assert_eq!(
        eval_strict("${v/a}", &[("v", "x")]),
        Err(EnvsubstError::BadSubstitution)
    );
    assert_eq!(
        eval_strict("${v:-abc", &[]),
        Err(EnvsubstError::ParseFuncSubstitution)
    );
    assert_eq!(
        EnvsubstError::MissingClosingBrace.to_string(),
        "missing closing brace"
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = |n: usize| format!("{}x{}", "${v:-".repeat(n), "}".repeat(n));
    assert_eq!(eval(&deep(10), &[]), "x");
    assert_eq!(
        eval_strict(&deep(MAX_NESTING + 1), &[]),
        Err(EnvsubstError::TooDeep)
    );
    assert_eq!(
        eval_strict(&deep(100_000), &[]),
        Err(EnvsubstError::TooDeep)
    );
}

#[test]
fn dollar_escapes() {
    let v = [("v", "abcdEFGH28ij")];
    assert_eq!(eval("$${v}", &v), "${v}");
    assert_eq!(eval("$$v", &v), "$v");
    assert_eq!(eval("$$$${v}", &v), "$${v}");
    assert_eq!(eval("$$${v}", &v), "$abcdEFGH28ij");
    assert_eq!(
        eval("some text ${v}$${x$${v}$v${v}", &v),
        "some text abcdEFGH28ij${x${v}$vabcdEFGH28ij"
    );
    assert_eq!(
        eval("something $${x=${d}}", &[("d", "foo")]),
        "something ${x=foo}"
    );
    // Escapes are not processed inside default values (as in Flux).
    assert_eq!(eval("${v:-$$x}", &[]), "$$x");
}

#[test]
fn strict_mode_reports_the_missing_variable() {
    assert_eq!(eval_strict("${a}", &[("a", "")]), Ok(String::new()));
    let err = eval_strict("x: ${missing}", &[]).unwrap_err();
    assert_eq!(err, EnvsubstError::VarNotSet("missing".into()));
    assert_eq!(
        err.to_string(),
        "variable not set (strict mode): \"missing\""
    );
    for form in [
        "${#m}",
        "${m^}",
        "${m^^}",
        "${m,}",
        "${m,,}",
        "${m:0}",
        "${m:0:10}",
        "${m/p/r}",
        "${m//p/r}",
        "${m/#p/r}",
        "${m/%p/r}",
        "${m#p}",
        "${m##p}",
        "${m%p}",
        "${m%%p}",
    ] {
        assert_eq!(
            eval_strict(form, &[]),
            Err(EnvsubstError::VarNotSet("m".into())),
            "{form}"
        );
    }
    for (form, want) in [("${m:-f}", "f"), ("${m:=a}", "a"), ("${m=a}", "a")] {
        assert_eq!(eval_strict(form, &[]).unwrap(), want, "{form}");
    }
    // A missing variable nested in a default fails too.
    assert_eq!(
        eval_strict("${m:-${n}}", &[]),
        Err(EnvsubstError::VarNotSet("n".into()))
    );
    // Escaped references are not variables.
    assert_eq!(eval_strict("$${m}", &[]).unwrap(), "${m}");
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": "ns"}, "data": data})
}

#[test]
fn objects_are_substituted_through_yaml_and_types_can_change() {
    let deploy = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web-${env}", "labels": {"tier": "${tier:=frontend}"}},
        "spec": {"replicas": "${replicas}", "template": {"spec": {"containers": [
            {"name": "app", "image": "nginx:${tag}", "args": ["--debug=${debug}"]}
        ]}}}
    });
    let out = substitute(
        vec![deploy],
        &vars(&[
            ("env", "prod"),
            ("replicas", "3"),
            ("tag", "1.27"),
            ("debug", "true"),
        ]),
        true,
    )
    .unwrap();
    let d = &out[0];
    assert_eq!(d["metadata"]["name"], "web-prod");
    assert_eq!(d["metadata"]["labels"]["tier"], "frontend");
    assert_eq!(
        d["spec"]["replicas"],
        json!(3),
        "unquoted number becomes an int"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["args"][0],
        "--debug=true"
    );
}

#[test]
fn quoted_strings_stay_strings_and_multiline_values_survive() {
    // "3" is a string in the input, so the YAML text quotes it and it stays a string.
    let obj = cm(json!({"count": "3", "port": "${port}", "script": "line1\necho ${who}\n"}));
    let out = substitute(vec![obj], &vars(&[("port", "8080"), ("who", "me")]), true).unwrap();
    assert_eq!(out[0]["data"]["count"], json!("3"));
    assert_eq!(out[0]["data"]["port"], json!(8080));
    assert_eq!(out[0]["data"]["script"], json!("line1\necho me\n"));
}

#[test]
fn opt_out_by_label_or_annotation_exact_value() {
    let mut by_label = cm(json!({"k": "${v}"}));
    by_label["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/substitute": "disabled"});
    let mut by_annotation = cm(json!({"k": "${v}"}));
    by_annotation["metadata"]["annotations"] =
        json!({"kustomize.toolkit.fluxcd.io/substitute": "disabled"});
    let mut wrong_case = cm(json!({"k": "${v}"}));
    wrong_case["metadata"]["annotations"] =
        json!({"kustomize.toolkit.fluxcd.io/substitute": "Disabled"});
    assert!(substitution_disabled(&by_label));
    assert!(substitution_disabled(&by_annotation));
    assert!(!substitution_disabled(&wrong_case));

    let out = substitute(
        vec![by_label.clone(), by_annotation.clone(), wrong_case],
        &vars(&[("v", "x")]),
        true,
    )
    .unwrap();
    assert_eq!(out[0], by_label);
    assert_eq!(out[1], by_annotation);
    assert_eq!(out[2]["data"]["k"], "x");
    // An opted-out object with an undefined variable does not fail in strict mode.
    let mut strict_skip = cm(json!({"k": "${undefined}"}));
    strict_skip["metadata"]["labels"] =
        json!({"kustomize.toolkit.fluxcd.io/substitute": "disabled"});
    assert!(substitute(vec![strict_skip], &vars(&[("v", "x")]), true).is_ok());
}

#[test]
fn strategies_with_variables_and_always() {
    let obj = cm(json!({"k": "${v:=fallback}", "u": "${undefined}"}));
    // WithVariables and no variables: untouched, even in strict mode.
    let out = substitute(vec![obj.clone()], &BTreeMap::new(), true).unwrap();
    assert_eq!(out[0], obj);
    // Always, non-strict: defaults apply and the undefined one becomes empty.
    let out = substitute_with(
        vec![obj.clone()],
        &BTreeMap::new(),
        SubstituteOptions {
            strict: false,
            always: true,
        },
    )
    .unwrap();
    assert_eq!(out[0]["data"]["k"], "fallback");
    assert_eq!(out[0]["data"]["u"], Value::Null, "`u: ` reads back as null");
    // Always, strict: the undefined variable fails.
    let err = substitute_with(
        vec![obj],
        &BTreeMap::new(),
        SubstituteOptions {
            strict: true,
            always: true,
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "post build failed for 'ConfigMap.v1.[noGrp]/app': envsubst error: variable substitution failed: variable not set (strict mode): \"undefined\""
    );
}

#[test]
fn strict_error_names_object_and_variable() {
    let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": "${replicas}"}});
    let err = substitute(vec![obj.clone()], &vars(&[("other", "1")]), true).unwrap_err();
    assert_eq!(err.id, "Deployment.v1.apps/web");
    assert_eq!(
        err.source,
        PostBuildError::Eval(EnvsubstError::VarNotSet("replicas".into()))
    );
    assert_eq!(
        err.to_string(),
        "post build failed for 'Deployment.v1.apps/web': envsubst error: variable substitution failed: variable not set (strict mode): \"replicas\""
    );
    // Non-strict: the empty value reads back as null.
    let out = substitute(vec![obj], &vars(&[("other", "1")]), false).unwrap();
    assert_eq!(out[0]["spec"]["replicas"], Value::Null);
}

#[test]
fn invalid_var_names_are_rejected() {
    assert!(valid_var_name("_a1"));
    assert!(valid_var_name("Abc_9"));
    assert!(!valid_var_name("9abc"));
    assert!(!valid_var_name("a-b"));
    assert!(!valid_var_name("a.b"));
    assert!(!valid_var_name(""));
    assert!(!valid_var_name("é"));
    let err = substitute(
        vec![cm(json!({"k": "v"}))],
        &vars(&[("bad-name", "x")]),
        true,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "post build failed for 'ConfigMap.v1.[noGrp]/app': envsubst error: 'bad-name' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'"
    );
}

#[test]
fn substitution_that_breaks_yaml_is_reported() {
    let obj = cm(json!({"k": "${v}"}));
    let err = substitute(vec![obj], &vars(&[("v", "a: b: c")]), true).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "post build failed for 'ConfigMap.v1.[noGrp]/app': envsubst error: YAMLToJSON: "
        ),
        "{err}"
    );
}

#[test]
fn object_ids_follow_kustomize() {
    assert_eq!(object_id(&cm(json!({}))), "ConfigMap.v1.[noGrp]/app");
    assert_eq!(
        object_id(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "a:b"}})
        ),
        "ClusterRole.v1.rbac.authorization.k8s.io/a:b"
    );
    assert_eq!(object_id(&json!({})), "[noKind].[noVer].[noGrp]/");
}

#[test]
fn strict_mode_follows_the_feature_gate() {
    use rflux_common::runtime::flags::{KUSTOMIZE_FEATURE_GATES, parse_feature_gates};
    let default = parse_feature_gates("", KUSTOMIZE_FEATURE_GATES).unwrap();
    assert!(strict_from_gates(&default));
    let off = parse_feature_gates(
        "StrictPostBuildSubstitutions=false",
        KUSTOMIZE_FEATURE_GATES,
    )
    .unwrap();
    assert!(!strict_from_gates(&off));
    assert!(strict_from_gates(&[]));
}
