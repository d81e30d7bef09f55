//! Decisions as schema 1 logged them (decision format 0: each effect's Rust `Debug` text, one
//! a line), read into [`Decision`]s so that those batches replay as they were decided, like
//! every other build's ([`crate::driver::recover`]). The grammar is the little `Debug` prints
//! for the core's effects: `Name { field: value, ... }`, `Name(value)`, bare names, quoted
//! strings with Rust's escapes, and whole numbers. A line that does not read stops the start
//! with an error naming it: a decision is never guessed.

use crate::command::{Decision, StopRecord};
use qm_core::{AttemptId, JobId};

/// One value of `Debug` text.
#[derive(Debug, PartialEq)]
enum Value {
    Str(String),
    Num(u64),
    /// `Name`, `Name(values)` or `Name { fields }`.
    Named(String, Vec<(String, Value)>),
}

struct Parser<'a> {
    rest: &'a str,
}

impl Parser<'_> {
    fn skip_spaces(&mut self) {
        self.rest = self.rest.trim_start_matches(' ');
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_spaces();
        match self.rest.strip_prefix(c) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    fn want(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{c}' at '{}'", self.rest))
        }
    }

    fn word(&mut self) -> Result<String, String> {
        self.skip_spaces();
        let end = self
            .rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest.len());
        if end == 0 {
            return Err(format!("expected a name or a number at '{}'", self.rest));
        }
        let (w, rest) = self.rest.split_at(end);
        self.rest = rest;
        Ok(w.to_string())
    }

    fn string(&mut self) -> Result<String, String> {
        let mut out = String::new();
        let mut chars = self.rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &self.rest[i + 1..];
                    return Ok(out);
                }
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some('t') => out.push('\t'),
                    Some('0') => out.push('\0'),
                    Some(e @ ('\\' | '"' | '\'')) => out.push(e),
                    Some('u') => {
                        let hex: String = chars
                            .by_ref()
                            .map(|(_, c)| c)
                            .skip_while(|&c| c == '{')
                            .take_while(|&c| c != '}')
                            .collect();
                        let c = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| format!("bad escape \\u{{{hex}}}"))?;
                        out.push(c);
                    }
                    other => return Err(format!("bad escape \\{other:?}")),
                },
                c => out.push(c),
            }
        }
        Err("a string does not end".into())
    }

    fn value(&mut self) -> Result<Value, String> {
        if self.eat('"') {
            return self.string().map(Value::Str);
        }
        let word = self.word()?;
        if word.starts_with(|c: char| c.is_ascii_digit()) {
            return word
                .parse()
                .map(Value::Num)
                .map_err(|e| format!("{word}: {e}"));
        }
        let mut fields = Vec::new();
        if self.eat('{') {
            while !self.eat('}') {
                let name = self.word()?;
                self.want(':')?;
                fields.push((name, self.value()?));
                if !self.eat(',') {
                    self.want('}')?;
                    break;
                }
            }
        } else if self.eat('(') {
            while !self.eat(')') {
                fields.push((String::new(), self.value()?));
                if !self.eat(',') {
                    self.want(')')?;
                    break;
                }
            }
        }
        Ok(Value::Named(word, fields))
    }
}

impl Value {
    fn field(&self, name: &str) -> Result<&Value, String> {
        match self {
            Value::Named(_, fields) => fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
                .ok_or_else(|| format!("no field {name} in {self:?}")),
            _ => Err(format!("{self:?} has no fields")),
        }
    }

    fn name(&self) -> Result<&str, String> {
        match self {
            Value::Named(n, _) => Ok(n),
            _ => Err(format!("{self:?} is not a name")),
        }
    }

    fn text(&self, name: &str) -> Result<String, String> {
        match self.field(name)? {
            Value::Str(s) => Ok(s.clone()),
            other => Err(format!("{name} is {other:?}, not a string")),
        }
    }

    /// A number, bare or in a newtype (`JobId(3)`).
    fn number(&self, name: &str) -> Result<u64, String> {
        match self.field(name)? {
            Value::Num(n) => Ok(*n),
            Value::Named(_, inner) => match inner.as_slice() {
                [(_, Value::Num(n))] => Ok(*n),
                _ => Err(format!("{name} is not a number")),
            },
            Value::Str(_) => Err(format!("{name} is a string, not a number")),
        }
    }
}

fn decision(v: &Value) -> Result<Decision, String> {
    let job = JobId(v.number("job")?);
    Ok(match v.name()? {
        "Start" => Decision::Start {
            job,
            attempt: AttemptId(v.number("attempt")?),
            unit: v.text("unit")?,
            count: u32::try_from(v.number("count")?).map_err(|e| e.to_string())?,
        },
        "Stop" => {
            let cause = v.field("cause")?;
            Decision::Stop {
                job,
                attempt: AttemptId(v.number("attempt")?),
                cause: match cause.name()? {
                    "Reclaim" => StopRecord::Reclaim {
                        for_job: JobId(cause.number("for_job")?),
                        by_share: cause.text("by_share")?,
                    },
                    "InShare" => StopRecord::InShare {
                        for_job: JobId(cause.number("for_job")?),
                    },
                    "Terminated" => StopRecord::Terminated {
                        reason: cause.text("reason")?,
                    },
                    "Drill" => StopRecord::Drill {
                        reason: cause.text("reason")?,
                    },
                    "Requeue" => StopRecord::Requeue {
                        reason: cause.text("reason")?,
                    },
                    other => return Err(format!("unknown stop cause {other}")),
                },
            }
        }
        "Finished" => Decision::Finished {
            job,
            status: v.field("status")?.name()?.to_uppercase(),
            reason: v.text("reason")?,
        },
        "Requeued" => Decision::Requeued {
            job,
            reason: v.text("reason")?,
        },
        other => return Err(format!("unknown decision {other}")),
    })
}

/// The decisions of one batch in format 0.
pub fn decisions(text: &str) -> Result<Vec<Decision>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut p = Parser { rest: line };
            let v = p.value()?;
            p.skip_spaces();
            if !p.rest.is_empty() {
                return Err(format!("'{}' follows the decision", p.rest));
            }
            decision(&v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_core::{AttemptId, Effect, JobId, JobStatus, StopCause};

    #[test]
    fn every_effect_reads_back_from_its_debug_text() {
        let effects = [
            Effect::Start {
                job: JobId(1),
                attempt: AttemptId(0),
                unit: "ml.g5.xlarge".into(),
                count: 2,
            },
            Effect::Stop {
                job: JobId(4),
                attempt: AttemptId(3),
                cause: StopCause::Reclaim {
                    for_job: JobId(7),
                    by_share: "prod \"a\"".into(),
                },
            },
            Effect::Stop {
                job: JobId(5),
                attempt: AttemptId(4),
                cause: StopCause::InShare { for_job: JobId(8) },
            },
            Effect::Stop {
                job: JobId(3),
                attempt: AttemptId(2),
                cause: StopCause::Terminated {
                    reason: "line\nbreak, {brace} é ✓ \\".into(),
                },
            },
            Effect::Finished {
                job: JobId(2),
                status: JobStatus::Failed,
                reason: "Received status from SageMaker: AlgorithmError: code 3".into(),
            },
            Effect::Finished {
                job: JobId(1),
                status: JobStatus::Succeeded,
                reason: "Training job completed".into(),
            },
            Effect::Requeued {
                job: JobId(4),
                reason: "Preempted: capacity reclaimed by quota share prod".into(),
            },
        ];
        let text: Vec<String> = effects.iter().map(|e| format!("{e:?}")).collect();
        let read = decisions(&text.join("\n")).unwrap();
        let want: Vec<Decision> = effects.iter().map(Decision::from).collect();
        assert_eq!(read, want);
    }

    #[test]
    fn a_line_that_does_not_read_is_an_error_naming_it() {
        let e = decisions("Start { job: JobId(1), attempt: AttemptId(0) }\nBogus { job: 1 }")
            .unwrap_err();
        assert!(e.contains("unit"), "{e}");
        let e = decisions("Launched { job: JobId(1) }").unwrap_err();
        assert!(e.contains("unknown decision Launched"), "{e}");
    }
}
