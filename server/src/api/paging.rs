//! Paging of listings: `limit`, `sort` and an opaque `cursor`. A cursor names the listing and
//! the sort it was made for as well as the position, so it cannot be misread as a position in
//! another order; clients pass it back unchanged and never build one.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::ApiError;

/// The page size when none is asked for.
const DEFAULT_LIMIT: i64 = 100;
/// The largest page served.
pub(super) const MAX_LIMIT: i64 = 1_000;
/// The cursor format; a change of format bumps it, so an old cursor is refused, not misread.
const CURSOR_VERSION: &str = "c1";

/// The page size asked for, checked.
pub(super) fn limit(limit: Option<i64>) -> Result<i64, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("{limit} is outside 1..={MAX_LIMIT}"),
        ));
    }
    Ok(limit)
}

/// The sort asked for, one of `allowed` (the first is the default).
pub(super) fn sort(
    asked: Option<&str>,
    allowed: &[&'static str],
) -> Result<&'static str, ApiError> {
    let Some(asked) = asked else {
        return Ok(allowed[0]);
    };
    allowed
        .iter()
        .copied()
        .find(|s| *s == asked)
        .ok_or_else(|| {
            ApiError::invalid(
                "sort",
                format!(
                    "{asked:?} is not a sort here; use one of {}",
                    allowed.join(", ")
                ),
            )
        })
}

/// The cursor of the page after the one whose last item has sort key `key`.
pub(super) fn cursor(listing: &str, sort: &str, key: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{CURSOR_VERSION}\n{listing}\n{sort}\n{key}"))
}

/// The sort key a cursor of `listing` under `sort` starts after.
pub(super) fn position(raw: &str, listing: &str, sort: &str) -> Result<String, ApiError> {
    let foreign = || ApiError::invalid("cursor", "is not a cursor this API returned");
    let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| foreign())?;
    let text = String::from_utf8(bytes).map_err(|_| foreign())?;
    let mut parts = text.splitn(4, '\n');
    let (Some(CURSOR_VERSION), Some(of), Some(made_for), Some(key)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(foreign());
    };
    if of != listing {
        return Err(ApiError::invalid(
            "cursor",
            format!("is a cursor of {of}, not of {listing}"),
        ));
    }
    if made_for != sort {
        return Err(ApiError::invalid(
            "cursor",
            format!("was made for sort={made_for}; ask the next page with that sort"),
        ));
    }
    Ok(key.to_owned())
}

/// The id a cursor starts after.
pub(super) fn position_id(raw: &str, listing: &str, sort: &str) -> Result<i64, ApiError> {
    position(raw, listing, sort)?
        .parse()
        .map_err(|_| ApiError::invalid("cursor", "is not a cursor this API returned"))
}

/// The next page's cursor: present when the page is full (a full last page costs the client
/// one more, empty, request rather than the server a count).
pub(super) fn next_cursor<T>(
    items: &[T],
    limit: i64,
    listing: &str,
    sort: &str,
    key: impl Fn(&T) -> String,
) -> Option<String> {
    let full = i64::try_from(items.len()).is_ok_and(|n| n == limit);
    full.then(|| items.last().map(|last| cursor(listing, sort, &key(last))))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_only_in_its_own_listing_and_sort() {
        let c = cursor("jobs", "name", "etl\nload");
        assert_eq!(position(&c, "jobs", "name").unwrap(), "etl\nload");
        assert!(!c.contains("etl"), "opaque: {c}");
        let wrong_sort = position(&c, "jobs", "-name").unwrap_err().to_string();
        assert!(wrong_sort.contains("sort=name"), "{wrong_sort}");
        assert!(position(&c, "runs", "name").is_err());
        assert!(position("42", "jobs", "name").is_err());
        assert!(position("!!", "jobs", "name").is_err());
        let id = cursor("runs", "-created", "17");
        assert_eq!(position_id(&id, "runs", "-created").unwrap(), 17);
    }

    #[test]
    fn limits_and_sorts_are_checked() {
        assert_eq!(limit(None).unwrap(), DEFAULT_LIMIT);
        assert!(limit(Some(0)).is_err() && limit(Some(MAX_LIMIT + 1)).is_err());
        assert_eq!(sort(None, &["-created", "created"]).unwrap(), "-created");
        assert_eq!(
            sort(Some("created"), &["-created", "created"]).unwrap(),
            "created"
        );
        let err = sort(Some("size"), &["-created", "created"]).unwrap_err();
        assert!(err.to_string().starts_with("sort:"), "{err}");
    }
}
