//! Typed property handles: a property name bound to the Rust type of its values, so that a
//! filter compares it only with values of that type.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::ast::{CmpOp, Filter};
use crate::edm::{Binary, EdmValue};

/// A property of an entity type, typed by the Rust type `T` of its field: the comparisons
/// build [`Filter`]s whose literal must be a value of that type.
///
/// `#[derive(TableEntity)]` generates one constant per field (`Employee::EMAIL`), named after
/// the field and holding the property's name as stored, so a misspelled property does not
/// compile and neither does a comparison with a value of another type. A field of type
/// `Option<T>` compares with `T`.
///
/// # Examples
/// ```
/// use tablekit_core::filter::Property;
///
/// const ID: Property<u32> = Property::new("Id");
/// const EMAIL: Property<Option<String>> = Property::new("Email");
///
/// let f = ID.ge(100).and(EMAIL.eq("jonesj@contoso.com"));
/// assert_eq!(f.render()?, "(Id ge 100L) and (Email eq 'jonesj@contoso.com')");
/// # Ok::<(), tablekit_core::Error>(())
/// ```
///
/// Comparing with a value of another type does not compile:
/// ```compile_fail
/// # use tablekit_core::filter::Property;
/// const ID: Property<u32> = Property::new("Id");
/// let f = ID.eq("223");
/// ```
pub struct Property<T> {
    name: &'static str,
    // `fn() -> T`: the handle neither owns nor borrows a `T`, so it is `Copy`, `Send` and
    // `Sync` whatever `T` is.
    ty: PhantomData<fn() -> T>,
}

impl<T> Property<T> {
    /// A handle on the property `name`, whose values are `T`s. The name is checked when a
    /// filter using it is rendered.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            ty: PhantomData,
        }
    }

    /// The property's name, as stored (for `$select`, or [`Filter`]'s untyped constructors).
    pub const fn name(self) -> &'static str {
        self.name
    }

    /// `property op value`.
    pub fn compare<V: FilterValue<T>>(self, op: CmpOp, value: V) -> Filter {
        Filter::compare(self.name, op, value.into_edm_value())
    }

    /// `property eq value`.
    pub fn eq<V: FilterValue<T>>(self, value: V) -> Filter {
        self.compare(CmpOp::Eq, value)
    }

    /// `property ne value`.
    pub fn ne<V: FilterValue<T>>(self, value: V) -> Filter {
        self.compare(CmpOp::Ne, value)
    }

    /// `property gt value`.
    pub fn gt<V: FilterValue<T>>(self, value: V) -> Filter {
        self.compare(CmpOp::Gt, value)
    }

    /// `property ge value`.
    pub fn ge<V: FilterValue<T>>(self, value: V) -> Filter {
        self.compare(CmpOp::Ge, value)
    }

    /// `property lt value`.
    pub fn lt<V: FilterValue<T>>(self, value: V) -> Filter {
        self.compare(CmpOp::Lt, value)
    }

    /// `property le value`.
    pub fn le<V: FilterValue<T>>(self, value: V) -> Filter {
        self.compare(CmpOp::Le, value)
    }
}

// Written out rather than derived: derives would require `T: Clone`, `T: Debug`, ….
impl<T> Clone for Property<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Property<T> {}

impl<T> fmt::Debug for Property<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Property").field(&self.name).finish()
    }
}

impl<T> PartialEq for Property<T> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<T> Eq for Property<T> {}

impl<T> Hash for Property<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

/// The property type of a field whose stored type the derive cannot know (it is written by
/// `#[serde(with = …)]` or `serialize_with`): `Property<Untyped>` has a name but no typed
/// comparisons. Give the field `#[table(property_type = "…")]` to type it, or compare its
/// [`Property::name`] with [`Filter::eq`] and friends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Untyped {}

/// A value a filter can compare a property of Rust type `P` with, and its EDM literal.
///
/// Implemented so that each value is compared as the type the entity serializer stores the
/// property as: `String` with `&str`, `String`, `&String`, `Cow<str>`; each integer type with
/// itself (`i8`–`i32`, `u8`, `u16` are `Edm.Int32`; `i64`, `u32` are `Edm.Int64`); `f32`,
/// `f64` (`Edm.Double`); `bool`; `chrono::DateTime<Utc>`; `uuid::Uuid`; `Vec<u8>` and
/// [`Binary`] with `Vec<u8>`, `&[u8]` (and `Binary`); `Option<P>` with whatever `P` accepts.
///
/// `u64`, `usize` and 128-bit integers have no implementation: the serializer stores them as
/// `Edm.Int64` only up to `i64::MAX`, and a filter literal above it has no faithful rendering.
///
/// # Examples
/// Implement it for your own types (a unit enum stored as a string, say):
///
/// ```
/// use tablekit_core::EdmValue;
/// use tablekit_core::filter::{FilterValue, Property};
///
/// #[derive(Clone, Copy)]
/// enum Level { Low, High }
///
/// impl FilterValue<Level> for Level {
///     fn into_edm_value(self) -> EdmValue {
///         EdmValue::from(match self { Level::Low => "Low", Level::High => "High" })
///     }
/// }
///
/// const LEVEL: Property<Level> = Property::new("Level");
/// assert_eq!(LEVEL.eq(Level::High).render()?, "Level eq 'High'");
/// # let _ = Level::Low;
/// # Ok::<(), tablekit_core::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "a property of type `{P}` cannot be compared with a `{Self}`",
    label = "expected a value of the property's type `{P}`",
    note = "a filter compares a property with a value of the type it is stored as; see `FilterValue`"
)]
pub trait FilterValue<P> {
    /// The typed literal the filter renders.
    fn into_edm_value(self) -> EdmValue;
}

macro_rules! filter_values {
    ($($property:ty => $($value:ty),+;)*) => {$($(
        impl FilterValue<$property> for $value {
            fn into_edm_value(self) -> EdmValue {
                EdmValue::from(self)
            }
        }
    )+)*};
}

filter_values! {
    String => String, &str, &String;
    i8 => i8;
    i16 => i16;
    i32 => i32;
    i64 => i64;
    u8 => u8;
    u16 => u16;
    u32 => u32;
    f32 => f32;
    f64 => f64;
    bool => bool;
    DateTime<Utc> => DateTime<Utc>;
    Uuid => Uuid;
    Vec<u8> => Vec<u8>, &[u8];
    Binary => Vec<u8>, &[u8];
}

impl FilterValue<String> for Cow<'_, str> {
    fn into_edm_value(self) -> EdmValue {
        EdmValue::String(self.into_owned())
    }
}

impl FilterValue<Binary> for Binary {
    fn into_edm_value(self) -> EdmValue {
        EdmValue::Binary(self.0)
    }
}

/// An optional property compares with the values its inner type accepts.
impl<P, V: FilterValue<P>> FilterValue<Option<P>> for V {
    fn into_edm_value(self) -> EdmValue {
        <V as FilterValue<P>>::into_edm_value(self)
    }
}
