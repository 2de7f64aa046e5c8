//! The function map: Go's builtins, slim-sprig v3's hermetic functions and Flux Operator's own
//! (`inputs`, `slugify`, `toYaml`, `mustToYaml`), each with its Go signature so argument
//! counts and types are checked as Go checks them.

mod builtin;
mod data;
mod lists;
mod numbers;
mod strings;

mod ctx;

use crate::value::Value;
pub(crate) use ctx::{Ctx, FResult, Imp, Ty};

pub(crate) struct FuncDef {
    pub params: &'static [Ty],
    pub variadic: Option<Ty>,
    pub imp: Imp,
}

const fn f(params: &'static [Ty], imp: Imp) -> FuncDef {
    FuncDef {
        params,
        variadic: None,
        imp,
    }
}

const fn v(params: &'static [Ty], var: Ty, imp: Imp) -> FuncDef {
    FuncDef {
        params,
        variadic: Some(var),
        imp,
    }
}

use Ty::{Any, Bool as B, Float as F, Int as I, Map as M, Refl, Str as S};

/// The date functions slim-sprig keeps in its hermetic map: present (so templates parse) but
/// not supported.
fn unsupported(_: &mut Ctx, _: Vec<Value>) -> FResult {
    Err("date functions are not supported by rflux".into())
}

/// Whether `name` is in the function map (the parser's check).
pub(crate) fn exists(name: &str) -> bool {
    lookup(name).is_some()
}

/// The function named `name`.
pub(crate) fn lookup(name: &str) -> Option<FuncDef> {
    Some(match name {
        // Go builtins
        "and" | "or" => v(&[Refl], Refl, builtin::and_or_unreachable),
        "not" => f(&[Refl], builtin::not),
        "len" => f(&[Refl], builtin::len),
        "index" => v(&[Refl], Refl, builtin::index),
        "print" => v(&[], Any, builtin::print),
        "printf" => v(&[S], Any, builtin::printf),
        "println" => v(&[], Any, builtin::println),
        "eq" => v(&[Refl], Refl, builtin::eq),
        "ne" => f(&[Refl, Refl], builtin::ne),
        "lt" => f(&[Refl, Refl], builtin::lt),
        "le" => f(&[Refl, Refl], builtin::le),
        "gt" => f(&[Refl, Refl], builtin::gt),
        "ge" => f(&[Refl, Refl], builtin::ge),
        "html" => v(&[], Any, builtin::html),
        "js" => v(&[], Any, builtin::js),
        "urlquery" => v(&[], Any, builtin::urlquery),
        "call" => v(&[Refl], Refl, builtin::and_or_unreachable),
        // Flux Operator
        "inputs" => f(&[], |c, _| Ok(c.inputs.clone())),
        "slugify" => f(&[S], strings::slugify),
        "toYaml" => f(&[Any], data::to_yaml),
        "mustToYaml" => f(&[Any], data::must_to_yaml),
        // sprig: dates (unsupported)
        "ago" | "duration" | "durationRound" | "unixEpoch" => f(&[Any], unsupported),
        "toDate" | "mustToDate" => f(&[S, S], unsupported),
        "mustDateModify" | "must_date_modify" => f(&[S, Any], unsupported),
        "hello" => f(&[], |_, _| Ok(Value::str("Hello!"))),
        // sprig: strings
        "trunc" => f(&[I, S], strings::trunc),
        "trim" => f(&[S], strings::trim),
        "upper" => f(&[S], strings::upper),
        "lower" => f(&[S], strings::lower),
        "title" => f(&[S], strings::title),
        "substr" => f(&[I, I, S], strings::substr),
        "repeat" => f(&[I, S], strings::repeat),
        "trimall" | "trimAll" => f(&[S, S], strings::trim_all),
        "trimSuffix" => f(&[S, S], strings::trim_suffix),
        "trimPrefix" => f(&[S, S], strings::trim_prefix),
        "contains" => f(&[S, S], strings::contains),
        "hasPrefix" => f(&[S, S], strings::has_prefix),
        "hasSuffix" => f(&[S, S], strings::has_suffix),
        "quote" => v(&[], Any, strings::quote),
        "squote" => v(&[], Any, strings::squote),
        "cat" => v(&[], Any, strings::cat),
        "indent" => f(&[I, S], strings::indent),
        "nindent" => f(&[I, S], strings::nindent),
        "replace" => f(&[S, S, S], strings::replace),
        "plural" => f(&[S, S, I], strings::plural),
        "toString" => f(&[Any], strings::to_string),
        "toStrings" => f(&[Any], strings::to_strings),
        "split" => f(&[S, S], strings::split),
        "splitList" => f(&[S, S], strings::split_list),
        "splitn" => f(&[S, I, S], strings::splitn),
        "join" => f(&[S, Any], strings::join),
        "sortAlpha" => f(&[Any], strings::sort_alpha),
        // hashing / encoding
        "sha1sum" => f(&[S], strings::sha1sum),
        "sha256sum" => f(&[S], strings::sha256sum),
        "adler32sum" => f(&[S], strings::adler32sum),
        "b64enc" => f(&[S], strings::b64enc),
        "b64dec" => f(&[S], strings::b64dec),
        "b32enc" => f(&[S], strings::b32enc),
        "b32dec" => f(&[S], strings::b32dec),
        // numbers
        "atoi" => f(&[S], numbers::atoi),
        "int" => f(&[Any], numbers::to_int),
        "int64" => f(&[Any], numbers::to_int64),
        "float64" => f(&[Any], numbers::to_float64),
        "seq" => v(&[], I, numbers::seq),
        "toDecimal" => f(&[Any], numbers::to_decimal),
        "add1" => f(&[Any], numbers::add1),
        "add" => v(&[], Any, numbers::add),
        "sub" => f(&[Any, Any], numbers::sub),
        "div" => f(&[Any, Any], numbers::div),
        "mod" => f(&[Any, Any], numbers::modulo),
        "mul" => v(&[Any], Any, numbers::mul),
        "randInt" => f(&[I, I], numbers::rand_int),
        "biggest" | "max" => v(&[Any], Any, numbers::max),
        "min" => v(&[Any], Any, numbers::min),
        "maxf" => v(&[Any], Any, numbers::maxf),
        "minf" => v(&[Any], Any, numbers::minf),
        "ceil" => f(&[Any], numbers::ceil),
        "floor" => f(&[Any], numbers::floor),
        "round" => v(&[Any, I], F, numbers::round),
        "until" => f(&[I], numbers::until),
        "untilStep" => f(&[I, I, I], numbers::until_step),
        // defaults / flow
        "default" => v(&[Any], Any, data::default),
        "empty" => f(&[Any], data::empty),
        "coalesce" => v(&[], Any, data::coalesce),
        "all" => v(&[], Any, data::all),
        "any" => v(&[], Any, data::any),
        "compact" => f(&[Any], lists::compact),
        "mustCompact" => f(&[Any], lists::must_compact),
        "ternary" => f(&[Any, Any, B], data::ternary),
        "fail" => f(&[S], |_, a| Err(data::str_arg(&a[0]))),
        // JSON
        "fromJson" => f(&[S], data::from_json),
        "mustFromJson" => f(&[S], data::must_from_json),
        "toJson" => f(&[Any], data::to_json),
        "mustToJson" => f(&[Any], data::must_to_json),
        "toPrettyJson" => f(&[Any], data::to_pretty_json),
        "mustToPrettyJson" => f(&[Any], data::must_to_pretty_json),
        "toRawJson" => f(&[Any], data::to_raw_json),
        "mustToRawJson" => f(&[Any], data::to_raw_json),
        // reflection
        "typeOf" => f(&[Any], data::type_of),
        "typeIs" => f(&[S, Any], data::type_is),
        "typeIsLike" => f(&[S, Any], data::type_is_like),
        "kindOf" => f(&[Any], data::kind_of),
        "kindIs" => f(&[S, Any], data::kind_is),
        "deepEqual" => f(&[Any, Any], data::deep_equal),
        // paths
        "base" | "osBase" => f(&[S], data::base),
        "dir" | "osDir" => f(&[S], data::dir),
        "clean" | "osClean" => f(&[S], data::clean),
        "ext" | "osExt" => f(&[S], data::ext),
        "isAbs" | "osIsAbs" => f(&[S], data::is_abs),
        // dicts
        "dict" => v(&[], Any, lists::dict),
        "get" => f(&[M, S], lists::get),
        "set" => f(&[M, S, Any], lists::set),
        "unset" => f(&[M, S], lists::unset),
        "hasKey" => f(&[M, S], lists::has_key),
        "pluck" => v(&[S], M, lists::pluck),
        "keys" => v(&[], M, lists::keys),
        "pick" => v(&[M], S, lists::pick),
        "omit" => v(&[M], S, lists::omit),
        "values" => f(&[M], lists::values),
        "dig" => v(&[], Any, lists::dig),
        // lists
        "tuple" | "list" => v(&[], Any, lists::list),
        "append" | "push" => f(&[Any, Any], lists::push),
        "mustAppend" | "mustPush" => f(&[Any, Any], lists::must_push),
        "prepend" => f(&[Any, Any], lists::prepend),
        "mustPrepend" => f(&[Any, Any], lists::must_prepend),
        "first" => f(&[Any], lists::first),
        "mustFirst" => f(&[Any], lists::must_first),
        "rest" => f(&[Any], lists::rest),
        "mustRest" => f(&[Any], lists::must_rest),
        "last" => f(&[Any], lists::last),
        "mustLast" => f(&[Any], lists::must_last),
        "initial" => f(&[Any], lists::initial),
        "mustInitial" => f(&[Any], lists::must_initial),
        "reverse" => f(&[Any], lists::reverse),
        "mustReverse" => f(&[Any], lists::must_reverse),
        "uniq" => f(&[Any], lists::uniq),
        "mustUniq" => f(&[Any], lists::must_uniq),
        "without" => v(&[Any], Any, lists::without),
        "mustWithout" => v(&[Any], Any, lists::must_without),
        "has" => f(&[Any, Any], lists::has),
        "mustHas" => f(&[Any, Any], lists::must_has),
        "slice" => v(&[Any], Any, lists::slice),
        "mustSlice" => v(&[Any], Any, lists::must_slice),
        "concat" => v(&[], Any, lists::concat),
        "chunk" => f(&[I, Any], lists::chunk),
        "mustChunk" => f(&[I, Any], lists::must_chunk),
        // regex
        "regexMatch" => f(&[S, S], strings::regex_match),
        "mustRegexMatch" => f(&[S, S], strings::must_regex_match),
        "regexFindAll" => f(&[S, S, I], strings::regex_find_all),
        "mustRegexFindAll" => f(&[S, S, I], strings::must_regex_find_all),
        "regexFind" => f(&[S, S], strings::regex_find),
        "mustRegexFind" => f(&[S, S], strings::must_regex_find),
        "regexReplaceAll" => f(&[S, S, S], strings::regex_replace_all),
        "mustRegexReplaceAll" => f(&[S, S, S], strings::must_regex_replace_all),
        "regexReplaceAllLiteral" => f(&[S, S, S], strings::regex_replace_all_literal),
        "mustRegexReplaceAllLiteral" => f(&[S, S, S], strings::must_regex_replace_all_literal),
        "regexSplit" => f(&[S, S, I], strings::regex_split),
        "mustRegexSplit" => f(&[S, S, I], strings::must_regex_split),
        "regexQuoteMeta" => f(&[S], strings::regex_quote_meta),
        // URLs
        "urlParse" => f(&[S], data::url_parse),
        "urlJoin" => f(&[M], data::url_join),
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn call(name: &str, args: Vec<Value>) -> FResult {
        let mut c = Ctx::new(&crate::options::Options::default(), Value::Nil);
        (lookup(name).unwrap().imp)(&mut c, args)
    }

    fn show(r: FResult) -> String {
        crate::gofmt::sprint_value(&r.unwrap())
    }

    #[test]
    fn strings_family() {
        assert_eq!(
            show(call("trunc", vec![Value::int(-2), Value::str("abcd")])),
            "cd"
        );
        assert_eq!(
            show(call("nindent", vec![Value::int(2), Value::str("a\nb")])),
            "\n  a\n  b"
        );
        assert_eq!(
            show(call("quote", vec![Value::int64(3), Value::Nil])),
            "\"3\""
        );
        assert_eq!(
            show(call("split", vec![Value::str("/"), Value::str("a/b")])),
            "map[_0:a _1:b]"
        );
        assert!(call("repeat", vec![Value::int(1 << 40), Value::str("x")]).is_err());
    }

    #[test]
    fn numbers_family() {
        assert_eq!(show(call("int", vec![Value::str("12")])), "12");
        assert_eq!(
            show(call(
                "add",
                vec![Value::int(1), Value::Float(2.9), Value::str("3")]
            )),
            "6"
        );
        assert_eq!(show(call("seq", vec![Value::int(3)])), "1 2 3");
        assert_eq!(show(call("until", vec![Value::int(-2)])), "[0 -1]");
        assert_eq!(
            show(call("round", vec![Value::Float(1.255), Value::int(1)])),
            "1.3"
        );
        assert_eq!(
            call("div", vec![Value::int(1), Value::int(0)]).unwrap_err(),
            "runtime error: integer divide by zero"
        );
    }

    #[test]
    fn lists_and_dicts_family() {
        let l = Value::list(vec![Value::int(1), Value::int(2), Value::int(1)]);
        assert_eq!(show(call("uniq", vec![l.clone()])), "[1 2]");
        assert_eq!(show(call("rest", vec![l.clone()])), "[2 1]");
        assert_eq!(
            show(call("chunk", vec![Value::int(2), l.clone()])),
            "[[1 2] [1]]"
        );
        assert_eq!(
            call("first", vec![Value::str("x")]).unwrap_err(),
            "Cannot find first on type string"
        );
        let d = call("dict", vec![Value::str("a"), Value::int(1)]).unwrap();
        call("set", vec![d.clone(), Value::str("b"), Value::int(2)]).unwrap();
        assert_eq!(show(Ok(d)), "map[a:1 b:2]");
    }

    #[test]
    fn data_family() {
        assert_eq!(
            show(call("default", vec![Value::str("d"), Value::str("")])),
            "d"
        );
        assert_eq!(show(call("typeOf", vec![Value::int64(1)])), "int64");
        assert_eq!(show(call("clean", vec![Value::str("a/../b/./c/")])), "b/c");
        assert_eq!(show(call("toJson", vec![Value::str("<")])), "\"\\u003c\"");
        assert_eq!(show(call("b64enc", vec![Value::str("hi")])), "aGk=");
        assert_eq!(
            show(call("adler32sum", vec![Value::str("foo")])),
            "42074437"
        );
    }
}
