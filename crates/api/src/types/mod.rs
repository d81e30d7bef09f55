//! The AWS Batch wire shapes, one Rust type per botocore shape, named exactly as in the model
//! (`spec/batch-service-2.json`) so that a reader can go from a type to its shape and back.
//!
//! House rules, so names can be guessed without opening these files:
//! * members are the model's member names in snake_case; serde renames them to camelCase;
//! * members outside the shape's `required` list are `Option` and are left out of the JSON when
//!   `None`; lists are `Vec`, maps are `BTreeMap<String, _>` (ordered output);
//! * Integer is `i32`, Long is `i64` (timestamps, epoch milliseconds), Double and Float are `f64`;
//! * string enums are Rust enums named as their shape, with `as_str()` for the wire spelling;
//! * unknown JSON members are ignored, so newer clients keep working.
//!
//! Validation lives in [`crate::validate`], not here: these types only say what may appear on
//! the wire, so a request that parses can still be refused with a message that names the field.

/// Defines a string enum of the model: serde by the wire spelling, `as_str`, `from_wire`,
/// `ALL` and `Display`. With `ignore_case`, input in any letter case is accepted.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident $($ignore_case:ident)? {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in the model's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The wire spellings, in the model's order (for error messages).
            pub const WIRE_VALUES: &'static [&'static str] = &[$($wire),+];

            /// The wire spelling.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }

            /// The value with this wire spelling, matched as wire input is.
            pub fn from_wire(value: &str) -> Option<Self> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| wire_enum!(@same [$($ignore_case)?] v.as_str(), value))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = String::deserialize(deserializer)?;
                Self::from_wire(&value).ok_or_else(|| {
                    <D::Error as serde::de::Error>::unknown_variant(&value, Self::WIRE_VALUES)
                })
            }
        }
    };
    (@same [ignore_case] $ours:expr, $theirs:expr) => { $ours.eq_ignore_ascii_case($theirs) };
    (@same [] $ours:expr, $theirs:expr) => { $ours == $theirs };
}

mod environment;
mod job;
mod policy;
mod queue;
mod share;
mod snapshot;
mod tags;

pub use environment::*;
pub use job::*;
pub use policy::*;
pub use queue::*;
pub use share::*;
pub use snapshot::*;
pub use tags::*;

/// Serde helper: leave a required epoch-millisecond member out of the JSON while it is unset
/// (0), instead of claiming 1970.
pub(crate) fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// Read access to the two capacity-limit shapes, `CapacityLimit` (service environments; both
/// members optional in the model) and `QuotaShareCapacityLimit` (quota shares; both required),
/// so that one validation and one conversion serve both.
pub trait CapacityLimitEntry {
    /// The instance type, if given.
    fn capacity_unit(&self) -> Option<&str>;
    /// The instance count, if given.
    fn max_capacity(&self) -> Option<i32>;
}

impl CapacityLimitEntry for CapacityLimit {
    fn capacity_unit(&self) -> Option<&str> {
        self.capacity_unit.as_deref()
    }
    fn max_capacity(&self) -> Option<i32> {
        self.max_capacity
    }
}

impl CapacityLimitEntry for QuotaShareCapacityLimit {
    fn capacity_unit(&self) -> Option<&str> {
        Some(&self.capacity_unit)
    }
    fn max_capacity(&self) -> Option<i32> {
        Some(self.max_capacity)
    }
}
