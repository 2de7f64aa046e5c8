//! What the functions share: parameter types and the per-render context.

use crate::options::Options;
use crate::value::{IntKind, MapKind, Value};

/// A Go parameter type, as far as argument validation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Any,
    Str,
    Int,
    Float,
    Bool,
    Map,
    /// `reflect.Value` (builtins): anything valid.
    Refl,
    /// Internal: no validation at all (chain receivers).
    NoCheck,
}

impl Ty {
    pub fn go_name(self) -> &'static str {
        match self {
            Ty::Any | Ty::NoCheck => "interface {}",
            Ty::Str => "string",
            Ty::Int => "int",
            Ty::Float => "float64",
            Ty::Bool => "bool",
            Ty::Map => "map[string]interface {}",
            Ty::Refl => "reflect.Value",
        }
    }

    pub fn accepts(self, v: &Value) -> bool {
        match self {
            Ty::Any | Ty::Refl | Ty::NoCheck => true,
            Ty::Str => matches!(v, Value::Str(_)),
            Ty::Int => matches!(v, Value::Int(_, IntKind::Int)),
            Ty::Float => matches!(v, Value::Float(_)),
            Ty::Bool => matches!(v, Value::Bool(_)),
            Ty::Map => matches!(v, Value::Map(_, MapKind::Any)),
        }
    }
}

/// Per-render state the functions may use: the inputs, the budget.
pub(crate) struct Ctx {
    pub inputs: Value,
    pub steps: u64,
    pub max_steps: u64,
    pub max_bytes: usize,
}

impl Ctx {
    pub fn new(opts: &Options, inputs: Value) -> Ctx {
        Ctx {
            inputs,
            steps: 0,
            max_steps: opts.max_steps,
            max_bytes: opts.max_output_bytes,
        }
    }

    /// Charges `n` units of work; an error once the budget is gone.
    pub fn charge(&mut self, n: u64) -> Result<(), String> {
        self.steps = self.steps.saturating_add(n);
        if self.steps > self.max_steps {
            return Err(format!(
                "exceeded maximum evaluation steps ({})",
                self.max_steps
            ));
        }
        Ok(())
    }

    /// Checks that a result of `bytes` bytes may be produced, and charges for it.
    pub fn produce(&mut self, bytes: usize) -> Result<(), String> {
        if bytes > self.max_bytes {
            return Err(format!(
                "exceeded maximum output size ({} bytes)",
                self.max_bytes
            ));
        }
        self.charge(bytes as u64 / 8)
    }

    /// Charges for and returns a string result.
    pub fn string(&mut self, s: String) -> FResult {
        self.produce(s.len())?;
        Ok(Value::str(s))
    }
}

pub(crate) type FResult = Result<Value, String>;
pub(crate) type Imp = fn(&mut Ctx, Vec<Value>) -> FResult;
