//! Argument evaluation: Go's `evalArg`, `validateType` and `idealConstant`.

use super::{At, MISSING, R, State};
use crate::ast::{Arg, Number};
use crate::funcs::Ty;
use crate::value::{IntKind, Value};

impl<'t> State<'t> {
    pub(super) fn ideal_constant(&self, n: &Number) -> R<Value> {
        if n.complex {
            return Err(self.errorf(format!("complex constants are not supported: {}", n.text)));
        }
        if n.is_char {
            return Ok(Value::Int(n.int.unwrap_or(0), IntKind::Int32));
        }
        if let Some(f) = n.float
            && !crate::strlit::is_hex_int(&n.text)
            && n.text.contains(['.', 'e', 'E', 'p', 'P'])
        {
            return Ok(Value::Float(f));
        }
        match n.int {
            Some(i) => Ok(Value::int(i)),
            None if n.uint_only => Err(self.errorf(format!("{} overflows int", n.text))),
            None => Ok(Value::Float(n.float.unwrap_or(0.0))),
        }
    }

    /// Go's `validateType`.
    pub(super) fn validate(&self, v: Value, ty: Ty) -> R<Value> {
        if ty == Ty::NoCheck {
            return Ok(v);
        }
        if v.is_invalid() {
            return match ty {
                Ty::Any | Ty::Map => Ok(Value::Nil),
                _ => Err(self.errorf(format!("invalid value; expected {}", ty.go_name()))),
            };
        }
        if ty.accepts(&v) {
            return Ok(v);
        }
        let got = if matches!(v, Value::Nil) {
            "interface {}"
        } else {
            v.type_name()
        };
        Err(self.errorf(format!(
            "wrong type for value; expected {}; got {}",
            ty.go_name(),
            got
        )))
    }

    pub(super) fn eval_arg(&mut self, dot: &Value, ty: Ty, n: &'t Arg) -> R<Value> {
        self.at = At::Arg(n);
        match n {
            Arg::Dot(_) => return self.validate(dot.clone(), ty),
            Arg::Nil(_) => {
                return match ty {
                    Ty::Any | Ty::Map | Ty::NoCheck | Ty::Refl => Ok(Value::Nil),
                    _ => Err(self.errorf(format!("cannot assign nil to {}", ty.go_name()))),
                };
            }
            Arg::Field(_, idents) => {
                let iface = self.dot_iface;
                let v = self.eval_field_chain_typed(
                    dot.clone(),
                    iface,
                    idents,
                    std::slice::from_ref(n),
                    MISSING,
                )?;
                return self.validate(v, ty);
            }
            Arg::Variable(_, idents) => {
                let v = self.eval_variable(idents, n, std::slice::from_ref(n), MISSING)?;
                return self.validate(v, ty);
            }
            Arg::Pipe(p) => {
                self.enter()?;
                let v = self.eval_pipeline(dot, p);
                self.nest -= 1;
                return self.validate(v?, ty);
            }
            Arg::Identifier(_, name) => {
                let v =
                    self.eval_function(dot, n, At::Arg(n), name, std::slice::from_ref(n), MISSING)?;
                return self.validate(v, ty);
            }
            Arg::Chain(_, node, fields) => {
                let v = self.eval_chain(dot, n, node, fields, std::slice::from_ref(n), MISSING)?;
                return self.validate(v, ty);
            }
            _ => {}
        }
        match (ty, n) {
            (Ty::Bool, Arg::Bool(_, b)) => Ok(Value::Bool(*b)),
            (Ty::Bool, _) => Err(self.errorf(format!("expected bool; found {n}"))),
            (Ty::Str, Arg::String(_, _, s)) => Ok(Value::str(s.as_str())),
            (Ty::Str, _) => Err(self.errorf(format!("expected string; found {n}"))),
            (Ty::Int, Arg::Number(_, num)) if num.int.is_some() => {
                let i = num.int.unwrap_or(0);
                Ok(if ty == Ty::Int {
                    Value::int(i)
                } else {
                    Value::int64(i)
                })
            }
            (Ty::Int, _) => Err(self.errorf(format!("expected integer; found {n}"))),
            (Ty::Float, Arg::Number(_, num)) if num.float.is_some() && !num.complex => {
                Ok(Value::Float(num.float.unwrap_or(0.0)))
            }
            (Ty::Float, _) => Err(self.errorf(format!("expected float; found {n}"))),
            (Ty::Any | Ty::Refl | Ty::NoCheck, _) => match n {
                Arg::Bool(_, b) => Ok(Value::Bool(*b)),
                Arg::Number(_, num) => self.ideal_constant(num),
                Arg::String(_, _, s) => Ok(Value::str(s.as_str())),
                _ => Err(self.errorf(format!(
                    "can't handle assignment of {n} to empty interface argument"
                ))),
            },
            _ => Err(self.errorf(format!("can't handle {n} for arg of type {}", ty.go_name()))),
        }
    }
}
