//! Key components: where an entity's partition or a copy's value comes from ([`KeySource`]),
//! and the values lookups take ([`KeyPart`], [`ValueRange`]).

use std::borrow::Cow;
use std::ops::{Bound, Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

use tablekit_core::filter::Property;
use tablekit_core::{EdmValue, Properties};
use tablekit_core::{Error, Result};

/// A key component before it is written as text: integers are zero-padded to a copy's width,
/// text is taken as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text, as the key holds it.
    Text(String),
    /// An integer, written in decimal (zero-padded when the copy declares a width).
    Int(i128),
}

impl Part {
    /// The text of this component in a key whose values are `width` characters (if
    /// declared). `what` names the copy or property in errors.
    ///
    /// # Errors
    /// [`Error::Encode`] for text of another width, or for a negative integer or one with
    /// more digits than `width` (it would not sort numerically).
    pub(crate) fn text(self, width: Option<usize>, what: &str) -> Result<String> {
        let text = match (self, width) {
            (Part::Int(n), Some(width)) if n < 0 => {
                return Err(Error::encode(
                    what,
                    format!(
                        "{n} is negative: a zero-padded width-{width} value sorts numerically \
                         only for numbers ≥ 0"
                    ),
                ));
            }
            (Part::Int(n), Some(width)) => format!("{n:0width$}"),
            (Part::Int(n), None) => n.to_string(),
            (Part::Text(s), _) => s,
        };
        match width {
            Some(width) if text.chars().count() != width => Err(Error::encode(
                what,
                format!("value {text:?} must be exactly {width} characters"),
            )),
            _ => Ok(text),
        }
    }

    /// The text of this component as a range bound: integers padded as
    /// [`text`](Self::text) pads them, text taken as it is (a bound may be shorter than the
    /// values it bounds).
    pub(crate) fn bound_text(self, width: Option<usize>, what: &str) -> Result<String> {
        match self {
            Part::Text(s) => Ok(s),
            int => int.text(width, what),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    pub trait SealedSource<T> {}
}

/// A value a key component can hold: text (`String`, `&str`, `&String`, `Cow<str>`) or an
/// integer (`i8`–`i64`, `u8`–`u64`, `usize`).
///
/// Lookups take one (`get("Sales", 223)` or `get("Sales", "000223")`: an integer is
/// zero-padded to the copy's [width](crate::CopySpec::with_width), text must already have it),
/// and so do key sources: a [`Property`] of one of these types, or a closure returning one.
/// Other types — floats, times, booleans, options — are refused at compile time: they have no
/// key text that sorts and compares as the value does.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a key component",
    label = "a key component is text or an integer",
    note = "use a `String` or integer property, or a closure that returns one"
)]
pub trait KeyPart: sealed::Sealed {
    /// The component.
    #[doc(hidden)]
    fn into_part(self) -> Part;
}

macro_rules! text_parts {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl KeyPart for $t {
            fn into_part(self) -> Part {
                Part::Text(self.to_string())
            }
        }
    )*};
}

macro_rules! int_parts {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl KeyPart for $t {
            fn into_part(self) -> Part {
                // Every type listed fits i128.
                Part::Int(self as i128)
            }
        }
    )*};
}

text_parts!(String, &str, &String);
int_parts!(i8, i16, i32, i64, u8, u16, u32, u64, usize);

impl sealed::Sealed for Cow<'_, str> {}
impl KeyPart for Cow<'_, str> {
    fn into_part(self) -> Part {
        Part::Text(self.into_owned())
    }
}

/// Where a key component of an entity of type `T` comes from: a [`Property`] constant of a
/// text or integer field (`Employee::EMAIL`, `Employee::ID`), read from the entity's encoded
/// properties, or a closure computing it (`|e: &Employee| e.email.to_lowercase()`).
///
/// A property must be one `T` serializes: [`IndexSpec::build`](crate::IndexSpecBuilder::build)
/// and [`ListSpecBuilder::build`](crate::ListSpecBuilder::build) refuse a name `T` does not
/// have, and a write whose property is missing (an `Option` field that is `None`) is refused
/// with [`Error::Encode`] before any request.
///
/// # Examples
/// A property of another type (a float, a date, bytes) gives no key component: it sorts
/// as text only by accident, so declaring a copy of it does not compile.
/// ```compile_fail
/// use tablekit_core::filter::Property;
/// use tablekit_index::CopySpec;
/// # struct Employee;
/// const SALARY: Property<f64> = Property::new("Salary");
/// let by_salary = CopySpec::<Employee>::new("salary", SALARY);
/// ```
/// The same declaration over a text or an integer property compiles:
/// ```
/// use tablekit_core::filter::Property;
/// use tablekit_index::CopySpec;
/// # struct Employee;
/// const GRADE: Property<u16> = Property::new("Grade");
/// let by_grade = CopySpec::<Employee>::new("grade", GRADE).with_width(3);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot give a key component of a `{T}`",
    label = "expected a `Property<_>` of a text or integer field, or a closure `|e: &{T}| ...`",
    note = "a closure must take `&{T}` and return text or an integer"
)]
pub trait KeySource<T>: sealed::SealedSource<T> + Send + Sync {
    /// The component of `entity`, whose encoded properties are `properties`.
    #[doc(hidden)]
    fn part(&self, entity: &T, properties: &Properties) -> Result<Part>;

    /// The property read, for a [`Property`] source.
    #[doc(hidden)]
    fn property(&self) -> Option<&'static str> {
        None
    }
}

impl<T, P: KeyPart> sealed::SealedSource<T> for Property<P> {}

impl<T, P: KeyPart + 'static> KeySource<T> for Property<P> {
    fn part(&self, _: &T, properties: &Properties) -> Result<Part> {
        let name = self.name();
        match properties.get(name) {
            Some(EdmValue::String(s)) => Ok(Part::Text(s.clone())),
            Some(EdmValue::Int32(n)) => Ok(Part::Int(i128::from(*n))),
            Some(EdmValue::Int64(n)) => Ok(Part::Int(i128::from(*n))),
            Some(other) => Err(Error::encode(
                name,
                format!(
                    "stored as {:?}: a key component is text or an integer",
                    other.edm_type()
                ),
            )),
            None => Err(Error::encode(
                name,
                "the entity has no such property to make a key of (a `None`, or a field the \
                 type does not serialize)",
            )),
        }
    }

    fn property(&self) -> Option<&'static str> {
        Some(self.name())
    }
}

impl<T, F, V> sealed::SealedSource<T> for F
where
    F: Fn(&T) -> V,
    V: KeyPart,
{
}

impl<T, F, V> KeySource<T> for F
where
    F: Fn(&T) -> V + Send + Sync + 'static,
    V: KeyPart,
{
    fn part(&self, entity: &T, _: &Properties) -> Result<Part> {
        Ok(self(entity).into_part())
    }
}

/// The values a range read covers: any Rust range of [`KeyPart`]s — `"000100"..="000199"`,
/// `100..200`, `"a"..`, `..` for the whole copy — or a pair of [`Bound`]s.
pub trait ValueRange: sealed::Sealed {
    /// The bounds.
    #[doc(hidden)]
    fn bounds(self) -> (Bound<Part>, Bound<Part>);
}

impl sealed::Sealed for RangeFull {}
impl ValueRange for RangeFull {
    fn bounds(self) -> (Bound<Part>, Bound<Part>) {
        (Bound::Unbounded, Bound::Unbounded)
    }
}

macro_rules! ranges {
    ($($range:ident => |$r:ident| $bounds:expr;)*) => {$(
        impl<V: KeyPart> sealed::Sealed for $range<V> {}
        impl<V: KeyPart> ValueRange for $range<V> {
            fn bounds(self) -> (Bound<Part>, Bound<Part>) {
                let $r = self;
                $bounds
            }
        }
    )*};
}

ranges! {
    Range => |r| (Bound::Included(r.start.into_part()), Bound::Excluded(r.end.into_part()));
    RangeInclusive => |r| {
        let (start, end) = r.into_inner();
        (Bound::Included(start.into_part()), Bound::Included(end.into_part()))
    };
    RangeFrom => |r| (Bound::Included(r.start.into_part()), Bound::Unbounded);
    RangeTo => |r| (Bound::Unbounded, Bound::Excluded(r.end.into_part()));
    RangeToInclusive => |r| (Bound::Unbounded, Bound::Included(r.end.into_part()));
}

impl<V: KeyPart> sealed::Sealed for (Bound<V>, Bound<V>) {}
impl<V: KeyPart> ValueRange for (Bound<V>, Bound<V>) {
    fn bounds(self) -> (Bound<Part>, Bound<Part>) {
        (
            self.0.map(KeyPart::into_part),
            self.1.map(KeyPart::into_part),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_padded_to_the_width_and_text_must_have_it() {
        assert_eq!(223u32.into_part().text(Some(6), "Id").unwrap(), "000223");
        assert_eq!(223u32.into_part().text(None, "Id").unwrap(), "223");
        assert_eq!("000223".into_part().text(Some(6), "Id").unwrap(), "000223");
        for refused in [
            "223".into_part(),
            1_000_000u64.into_part(),
            (-1i32).into_part(),
        ] {
            let e = refused.text(Some(6), "Id").unwrap_err();
            assert!(matches!(e, Error::Encode { .. }), "{e}");
        }
        // A bound may be a prefix of the values it bounds.
        assert_eq!(
            "0001".into_part().bound_text(Some(6), "Id").unwrap(),
            "0001"
        );
        assert_eq!(
            100u8.into_part().bound_text(Some(6), "Id").unwrap(),
            "000100"
        );
    }

    #[test]
    fn properties_and_closures_read_the_same_component() {
        const ID: Property<u32> = Property::new("Id");
        let props = Properties::new().with("Id", 223i64).with("Name", "Jun");
        let closure = |n: &u32| *n;
        assert_eq!(
            KeySource::<u32>::part(&ID, &223, &props).unwrap(),
            closure.part(&223, &props).unwrap()
        );
        const MISSING: Property<String> = Property::new("Email");
        let e = KeySource::<u32>::part(&MISSING, &223, &props).unwrap_err();
        assert!(matches!(e, Error::Encode { .. }), "{e}");
    }
}
