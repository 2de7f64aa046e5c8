//! Runtime values: the Go values a template sees (`interface{}` holding JSON-ish data, plus the
//! few concrete Go types the functions return, so that `typeOf`, `deepEqual` and argument type
//! checks behave as in Go).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Go integer types we distinguish (`typeOf`, `deepEqual`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntKind {
    Int,
    Int64,
    Int32,
}

/// Element type of a Go slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// `[]interface {}`
    Any,
    /// `[]string`
    Str,
    /// `[]int`
    Int,
    /// `[][]interface {}`
    Nested,
}

/// Element type of a Go map (keys are always strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MapKind {
    /// `map[string]interface {}`
    Any,
    /// `map[string]string`
    Str,
}

/// A slice's elements. Dropped iteratively, so deeply nested values cannot overflow the stack.
#[derive(Debug, Default)]
pub(crate) struct ListData(pub Vec<Value>);

/// A map's entries (Go iterates maps in sorted key order in templates). Dropped iteratively.
#[derive(Debug, Default)]
pub(crate) struct MapData(pub BTreeMap<String, Value>);

impl std::ops::Deref for ListData {
    type Target = Vec<Value>;
    fn deref(&self) -> &Vec<Value> {
        &self.0
    }
}

impl std::ops::Deref for MapData {
    type Target = BTreeMap<String, Value>;
    fn deref(&self) -> &BTreeMap<String, Value> {
        &self.0
    }
}

impl std::ops::DerefMut for MapData {
    fn deref_mut(&mut self) -> &mut BTreeMap<String, Value> {
        &mut self.0
    }
}

/// Takes apart the values whose last owner is going away, with a heap stack instead of
/// recursion.
fn dismantle(mut stack: Vec<Value>) {
    while let Some(v) = stack.pop() {
        match v {
            Value::List(rc, ..) => {
                if let Ok(mut inner) = Rc::try_unwrap(rc) {
                    stack.append(&mut inner.0);
                }
            }
            Value::Map(rc, _) => {
                if let Ok(cell) = Rc::try_unwrap(rc) {
                    let mut inner = cell.into_inner();
                    stack.extend(std::mem::take(&mut inner.0).into_values());
                }
            }
            _ => {}
        }
    }
}

impl Drop for ListData {
    fn drop(&mut self) {
        if self
            .0
            .iter()
            .any(|v| matches!(v, Value::List(..) | Value::Map(..)))
        {
            dismantle(std::mem::take(&mut self.0));
        }
    }
}

impl Drop for MapData {
    fn drop(&mut self) {
        if self
            .0
            .values()
            .any(|v| matches!(v, Value::List(..) | Value::Map(..)))
        {
            dismantle(std::mem::take(&mut self.0).into_values().collect());
        }
    }
}

pub(crate) type ListRef = Rc<ListData>;
pub(crate) type MapRef = Rc<RefCell<MapData>>;

#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// Go's invalid `reflect.Value`: "no value".
    Invalid,
    /// A nil `interface{}`.
    Nil,
    Bool(bool),
    Int(i64, IntKind),
    Float(f64),
    Str(Rc<str>),
    /// A slice; `None` elements never occur, a nil slice is `nil_slice = true`.
    List(ListRef, ListKind, bool),
    /// A map; Go maps are references, so `set` mutates in place.
    Map(MapRef, MapKind),
}

impl Value {
    pub fn str(s: impl Into<Rc<str>>) -> Value {
        Value::Str(s.into())
    }

    pub fn int(i: i64) -> Value {
        Value::Int(i, IntKind::Int)
    }

    pub fn int64(i: i64) -> Value {
        Value::Int(i, IntKind::Int64)
    }

    pub fn list(v: Vec<Value>) -> Value {
        Value::list_of(v, ListKind::Any, false)
    }

    /// A slice of the given Go element type (`nil`: a nil slice).
    pub fn list_of(v: Vec<Value>, kind: ListKind, nil: bool) -> Value {
        Value::List(Rc::new(ListData(v)), kind, nil)
    }

    /// A map of the given Go element type.
    pub fn map_of(m: BTreeMap<String, Value>, kind: MapKind) -> Value {
        Value::Map(Rc::new(RefCell::new(MapData(m))), kind)
    }

    pub fn str_list(v: Vec<String>) -> Value {
        Value::list_of(
            v.into_iter().map(Value::str).collect(),
            ListKind::Str,
            false,
        )
    }

    pub fn map(m: BTreeMap<String, Value>) -> Value {
        Value::map_of(m, MapKind::Any)
    }

    pub fn is_invalid(&self) -> bool {
        matches!(self, Value::Invalid)
    }

    /// Go's `%T`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Invalid | Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_, IntKind::Int) => "int",
            Value::Int(_, IntKind::Int64) => "int64",
            Value::Int(_, IntKind::Int32) => "int32",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_, ListKind::Any, _) => "[]interface {}",
            Value::List(_, ListKind::Str, _) => "[]string",
            Value::List(_, ListKind::Int, _) => "[]int",
            Value::List(_, ListKind::Nested, _) => "[][]interface {}",
            Value::Map(_, MapKind::Any) => "map[string]interface {}",
            Value::Map(_, MapKind::Str) => "map[string]string",
        }
    }

    /// Go's `reflect.Kind` name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Invalid | Value::Nil => "invalid",
            Value::Bool(_) => "bool",
            Value::Int(_, IntKind::Int) => "int",
            Value::Int(_, IntKind::Int64) => "int64",
            Value::Int(_, IntKind::Int32) => "int32",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(..) => "slice",
            Value::Map(..) => "map",
        }
    }

    /// Go template truth (`isTrue`).
    pub fn truth(&self) -> bool {
        match self {
            Value::Invalid | Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i, _) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l, ..) => !l.is_empty(),
            Value::Map(m, _) => !m.borrow().is_empty(),
        }
    }

    /// sprig's `empty`.
    pub fn empty(&self) -> bool {
        !self.truth()
    }

    pub fn len(&self) -> Option<usize> {
        match self {
            Value::Str(s) => Some(s.len()),
            Value::List(l, ..) => Some(l.len()),
            Value::Map(m, _) => Some(m.borrow().len()),
            _ => None,
        }
    }

    /// Builds a value from decoded JSON (apimachinery style: whole numbers are int64).
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::int64(i)
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Value::str(s.as_str()),
            serde_json::Value::Array(a) => Value::list(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => Value::map(
                o.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }
}

/// Go's `reflect.DeepEqual` for our values (types must match). Bounded: past a depth of 1000
/// or a million compared nodes the answer is `false`.
pub(crate) fn deep_equal(a: &Value, b: &Value, depth: usize) -> bool {
    deep_eq(a, b, depth, &mut 1_000_000)
}

fn deep_eq(a: &Value, b: &Value, depth: usize, budget: &mut usize) -> bool {
    if depth > 1000 || *budget == 0 {
        return false;
    }
    *budget -= 1;
    match (a, b) {
        (Value::Invalid | Value::Nil, Value::Invalid | Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x, k1), Value::Int(y, k2)) => k1 == k2 && x == y,
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::List(x, k1, n1), Value::List(y, k2, n2)) => {
            if k1 != k2 || n1 != n2 || x.len() != y.len() {
                return false;
            }
            Rc::ptr_eq(x, y)
                || x.iter()
                    .zip(y.iter())
                    .all(|(p, q)| deep_eq(p, q, depth + 1, budget))
        }
        (Value::Map(x, k1), Value::Map(y, k2)) => {
            if k1 != k2 {
                return false;
            }
            if Rc::ptr_eq(x, y) {
                return true;
            }
            let (x, y) = (x.borrow(), y.borrow());
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| deep_eq(v, w, depth + 1, budget)))
        }
        _ => false,
    }
}

/// Convenience for building maps in functions.
pub(crate) fn map_of(entries: Vec<(String, Value)>) -> Value {
    Value::map(
        entries
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>(),
    )
}
