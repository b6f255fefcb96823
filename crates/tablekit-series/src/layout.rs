//! [`SeriesLayout`]: the slots of a data series, declared once and checked against the
//! entity's property limit; [`SlotValue`]: the numeric types a slot can hold.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use tablekit_core::EdmValue;
use tablekit_core::limits::{MAX_USER_PROPERTIES, validate_property_name};
use tablekit_core::{Error, Limit, NameKind, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for f64 {}
}

/// A number one slot of a series holds: `i64` (stored as `Edm.Int64`), `i32` (`Edm.Int32`)
/// or `f64` (`Edm.Double`). Sealed: the set follows the Table service's numeric types.
pub trait SlotValue:
    sealed::Sealed + Copy + PartialEq + fmt::Debug + fmt::Display + Send + Sync + 'static
{
    /// The value of a slot nobody has written yet.
    const ZERO: Self;

    /// `self + other`, or `None` when the result is not representable (integer overflow, or a
    /// non-finite double).
    fn checked_add(self, other: Self) -> Option<Self>;

    /// The property value written for this number.
    fn to_edm(self) -> EdmValue;

    /// Reads a stored property, accepting any EDM type that converts losslessly (an `i64`
    /// slot reads `Edm.Int32` too, as other SDKs write small counts that way).
    fn from_edm(value: &EdmValue) -> Option<Self>;
}

impl SlotValue for i64 {
    const ZERO: Self = 0;
    fn checked_add(self, other: Self) -> Option<Self> {
        i64::checked_add(self, other)
    }
    fn to_edm(self) -> EdmValue {
        EdmValue::Int64(self)
    }
    fn from_edm(value: &EdmValue) -> Option<Self> {
        value.as_i64()
    }
}

impl SlotValue for i32 {
    const ZERO: Self = 0;
    fn checked_add(self, other: Self) -> Option<Self> {
        i32::checked_add(self, other)
    }
    fn to_edm(self) -> EdmValue {
        EdmValue::Int32(self)
    }
    fn from_edm(value: &EdmValue) -> Option<Self> {
        value.as_i64().and_then(|v| i32::try_from(v).ok())
    }
}

impl SlotValue for f64 {
    const ZERO: Self = 0.0;
    fn checked_add(self, other: Self) -> Option<Self> {
        Some(self + other).filter(|v| v.is_finite())
    }
    fn to_edm(self) -> EdmValue {
        EdmValue::Double(self)
    }
    fn from_edm(value: &EdmValue) -> Option<Self> {
        value.as_f64()
    }
}

/// Compile-time bound of the const-generic constructors: evaluating `FITS` fails the build
/// when `N` slots cannot fit one entity.
struct Fits<const N: usize>;

impl<const N: usize> Fits<N> {
    const FITS: () = assert!(
        N >= 1 && N <= MAX_USER_PROPERTIES,
        "a series entity holds 1 to 252 slots (one user property each)"
    );
}

/// The slots of a data series: their property names, in chart order, and how many other
/// properties the series entity carries. Declared once; every operation of a
/// [`crate::Series`] refuses a slot that is not in it before any request.
///
/// Construction checks the whole entity against the 252-user-property limit, so a series
/// that would not fit is refused when it is declared, not when the 253rd property is first
/// written. The const-generic constructors ([`SeriesLayout::numbered`],
/// [`SeriesLayout::fixed`]) check the slot count at compile time:
///
/// ```compile_fail
/// // 253 slots cannot fit one entity: this does not build.
/// let too_many = tablekit_series::SeriesLayout::numbered::<253>("D");
/// ```
///
/// ```
/// use tablekit_series::SeriesLayout;
/// let hours = SeriesLayout::hours();
/// assert_eq!((hours.len(), hours.slot(13)), (24, Some("H13")));
/// let days = SeriesLayout::numbered::<252>("D").unwrap();
/// assert_eq!(days.slot(0), Some("D000"));
/// // A runtime-sized layout is checked when it is built.
/// assert!(SeriesLayout::new((0..300).map(|i| format!("S{i}"))).is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SeriesLayout {
    slots: Arc<[String]>,
    other_properties: usize,
}

impl fmt::Debug for SeriesLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.slots.first().map_or("", String::as_str);
        let last = self.slots.last().map_or("", String::as_str);
        write!(
            f,
            "SeriesLayout({} slots {first}…{last}, {} other properties)",
            self.slots.len(),
            self.other_properties
        )
    }
}

impl SeriesLayout {
    /// A layout with these slot names, in this order.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] with [`Limit::UserProperties`] for more than 252 slots;
    /// [`Error::InvalidName`] for a name that is not a valid property name;
    /// [`Error::InvalidArgument`] for no slots or a name given twice.
    pub fn new<I, S>(slots: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let slots: Vec<String> = slots.into_iter().map(Into::into).collect();
        if slots.is_empty() {
            return Err(Error::invalid_argument(
                "slots",
                "a series needs at least one slot",
            ));
        }
        check_fits(slots.len(), 0)?;
        let mut seen = HashSet::with_capacity(slots.len());
        for slot in &slots {
            validate_property_name(slot)?;
            if !seen.insert(slot.as_str()) {
                return Err(Error::invalid_argument(
                    slot.as_str(),
                    "the slot is declared twice",
                ));
            }
        }
        Ok(Self {
            slots: slots.into(),
            other_properties: 0,
        })
    }

    /// A layout of exactly `N` names, with `N` checked at compile time (1 to 252).
    ///
    /// # Errors
    /// As [`SeriesLayout::new`] for the names.
    pub fn fixed<const N: usize>(slots: [&str; N]) -> Result<Self> {
        let () = Fits::<N>::FITS;
        Self::new(slots)
    }

    /// `N` slots named `prefix` plus a zero-padded index from 0 (`H00`…`H23`, `D000`…`D251`;
    /// at least two digits), with `N` checked at compile time (1 to 252).
    ///
    /// # Errors
    /// [`Error::InvalidName`] when `prefix` does not make valid property names (it must start
    /// with a letter or `_`).
    pub fn numbered<const N: usize>(prefix: &str) -> Result<Self> {
        let () = Fits::<N>::FITS;
        let width = (N - 1).to_string().len().max(2);
        Self::new((0..N).map(|i| format!("{prefix}{i:0width$}")))
    }

    /// The guide's 24 hourly slots, `H00`…`H23`.
    pub fn hours() -> Self {
        let slots: Vec<String> = (0..24).map(|h| format!("H{h:02}")).collect();
        Self {
            slots: slots.into(),
            other_properties: 0,
        }
    }

    /// Declares that the series entity also carries `count` properties that are not slots
    /// (a name, a unit, a last-updated time), so the limit is checked for the whole entity.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] with [`Limit::UserProperties`] when the slots and the other
    /// properties together exceed 252.
    pub fn with_other_properties(mut self, count: usize) -> Result<Self> {
        check_fits(self.slots.len(), count)?;
        self.other_properties = count;
        Ok(self)
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always `false`: a layout has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The slot names, in order.
    pub fn slots(&self) -> &[String] {
        &self.slots
    }

    /// The name of slot `index`.
    pub fn slot(&self, index: usize) -> Option<&str> {
        self.slots.get(index).map(String::as_str)
    }

    /// The index of the slot named `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.slots.iter().position(|s| s == name)
    }

    /// The properties the entity carries besides the slots, as declared.
    pub fn other_properties(&self) -> usize {
        self.other_properties
    }

    /// Whether [`crate::Series::add`] can keep its ledger of recent adds
    /// ([`crate::ADDS_PROPERTY`]) on the entity: one user property more than the layout
    /// declares, and no slot of that name.
    pub fn keeps_add_ledger(&self) -> bool {
        self.slots.len() + self.other_properties < MAX_USER_PROPERTIES
            && self.position(crate::ADDS_PROPERTY).is_none()
    }

    /// `name`'s index, or the error every operation gives for an unknown slot.
    pub(crate) fn require(&self, name: &str) -> Result<usize> {
        self.position(name).ok_or_else(|| Error::InvalidName {
            kind: NameKind::Property,
            name: name.to_owned(),
            reason: format!("not a slot of this series ({self:?})"),
        })
    }
}

fn check_fits(slots: usize, other: usize) -> Result<()> {
    let total = slots.saturating_add(other);
    if total > MAX_USER_PROPERTIES {
        return Err(Error::LimitExceeded {
            limit: Limit::UserProperties,
            actual: total,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_checked_at_construction() {
        assert!(SeriesLayout::new((0..252).map(|i| format!("S{i}"))).is_ok());
        let err = SeriesLayout::new((0..253).map(|i| format!("S{i}"))).unwrap_err();
        assert!(matches!(
            err,
            Error::LimitExceeded {
                limit: Limit::UserProperties,
                actual: 253
            }
        ));
        let hours = SeriesLayout::hours();
        assert!(hours.clone().with_other_properties(228).is_ok());
        assert!(matches!(
            hours.with_other_properties(229),
            Err(Error::LimitExceeded { actual: 253, .. })
        ));
    }

    #[test]
    fn names_are_checked() {
        assert!(matches!(
            SeriesLayout::new(["H00", "H00"]),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            SeriesLayout::new(["H-00"]),
            Err(Error::InvalidName { .. })
        ));
        assert!(SeriesLayout::new(["RowKey"]).is_err());
        assert!(SeriesLayout::new(Vec::<String>::new()).is_err());
        assert!(SeriesLayout::numbered::<3>("9").is_err());
    }

    #[test]
    fn hours_and_numbered_agree() {
        assert_eq!(
            SeriesLayout::hours(),
            SeriesLayout::numbered::<24>("H").unwrap()
        );
        let days = SeriesLayout::numbered::<200>("D").unwrap();
        assert_eq!((days.slot(0), days.slot(199)), (Some("D000"), Some("D199")));
        assert_eq!(days.position("D013"), Some(13));
        assert!(days.require("D200").is_err());
        let fixed = SeriesLayout::fixed(["Min", "Max", "Mean"]).unwrap();
        assert_eq!(fixed.slots(), ["Min", "Max", "Mean"]);
    }

    #[test]
    fn slot_values_convert_losslessly() {
        assert_eq!(i64::from_edm(&EdmValue::Int32(7)), Some(7));
        assert_eq!(i32::from_edm(&EdmValue::Int64(1 << 40)), None);
        assert_eq!(f64::from_edm(&EdmValue::Int32(2)), Some(2.0));
        assert_eq!(i64::from_edm(&EdmValue::String("7".into())), None);
        assert_eq!(i64::MAX.checked_add(1), None);
        assert_eq!(SlotValue::checked_add(f64::MAX, f64::MAX), None);
        assert_eq!(SlotValue::checked_add(1.5, 2.0), Some(3.5));
    }
}
