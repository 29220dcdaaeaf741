use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, RSA_PKCS1_SHA256, RsaKeyPair,
};
use serde_json::json;

use super::*;

const ISSUER: &str = "https://id.example.com";
const AUDIENCE: &str = "https://carillon.example.com";

fn enc(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

struct Signer {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl Signer {
    fn new() -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Signer { pair, rng }
    }

    fn jwk(&self, kid: &str) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
            "x": enc(&point[1..33]), "y": enc(&point[33..65])})
    }

    fn key(&self, kid: &str) -> VerifyingKey {
        let document = json!({"keys": [self.jwk(kid)]}).to_string();
        keys_of_jwks(document.as_bytes()).unwrap().remove(0)
    }

    fn token(&self, header: &Value, claims: &Value) -> String {
        let signed = format!(
            "{}.{}",
            enc(header.to_string().as_bytes()),
            enc(claims.to_string().as_bytes())
        );
        let signature = self.pair.sign(&self.rng, signed.as_bytes()).unwrap();
        format!("{signed}.{}", enc(signature.as_ref()))
    }
}

fn claims(now: i64) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "u-1", "preferred_username": "alice",
        "exp": now + 300, "iat": now, "groups": ["team-a", "ops"]})
}

fn expected(now_s: i64) -> Expected<'static> {
    Expected {
        issuer: ISSUER,
        audience: AUDIENCE,
        leeway_s: 30,
        now_s,
        groups_claim: "groups",
        name_claim: "preferred_username",
    }
}

const NOW: i64 = 1_800_000_000;

#[test]
fn a_good_token_names_its_person_and_groups() {
    let signer = Signer::new();
    let token = signer.token(&json!({"alg": "ES256", "kid": "k1"}), &claims(NOW));
    assert!(looks_like_jwt(&token));
    assert_eq!(header(&token).unwrap().kid.as_deref(), Some("k1"));
    let identity = verify(&token, &signer.key("k1"), &expected(NOW)).unwrap();
    assert_eq!(identity.subject, "u-1");
    assert_eq!(identity.name, "alice");
    assert_eq!(identity.groups, ["team-a", "ops"]);
}

#[test]
fn claims_that_do_not_match_are_refused_each_for_its_reason() {
    let signer = Signer::new();
    let key = signer.key("k1");
    let header = json!({"alg": "ES256", "kid": "k1"});
    let with = |field: &str, value: Value| {
        let mut c = claims(NOW);
        c[field] = value;
        signer.token(&header, &c)
    };
    let cases = [
        (with("iss", json!("https://evil.example.com")), "issued by"),
        (with("aud", json!("https://other.example.com")), "audience"),
        (with("exp", json!(NOW - 31)), "expired"),
        (with("nbf", json!(NOW + 31)), "not valid yet"),
        (with("sub", json!("")), "subject"),
        // A NumericDate may carry a fraction (RFC 7519 §2), for every date claim alike.
        (with("nbf", json!(NOW as f64 + 600.5)), "not valid yet"),
        (with("exp", json!(NOW as f64 - 30.5)), "expired"),
        (
            with("iat", json!(NOW as f64 + 600.5)),
            "issued in the future",
        ),
        (with("iat", json!(NOW + 31)), "issued in the future"),
        // A date that is not a number is not ignored.
        (
            with("nbf", json!((NOW + 600).to_string())),
            "`nbf` is not a date",
        ),
        (
            with("exp", json!((NOW + 600).to_string())),
            "`exp` is not a date",
        ),
        (with("iat", json!(null)), "`iat` is not a date"),
    ];
    for (token, why) in cases {
        let refusal = verify(&token, &key, &expected(NOW)).unwrap_err();
        assert!(
            refusal.to_string().contains(why),
            "{refusal} should say {why}"
        );
    }
    // Within the leeway, and an audience list naming us, pass.
    assert!(verify(&with("exp", json!(NOW - 29)), &key, &expected(NOW)).is_ok());
    let fractional = verify(
        &with("exp", json!(NOW as f64 + 300.75)),
        &key,
        &expected(NOW),
    );
    assert_eq!(fractional.unwrap().expires_at_s, NOW + 300);
    assert!(verify(&with("nbf", json!(NOW as f64 + 29.5)), &key, &expected(NOW)).is_ok());
    let listed = with("aud", json!(["https://other.example.com", AUDIENCE]));
    assert!(verify(&listed, &key, &expected(NOW)).is_ok());
}

#[test]
fn another_key_none_and_hmac_are_refused_before_any_claim_is_read() {
    let signer = Signer::new();
    let other = Signer::new();
    let token = other.token(&json!({"alg": "ES256", "kid": "k1"}), &claims(NOW));
    assert_eq!(
        verify(&token, &signer.key("k1"), &expected(NOW)),
        Err(Refusal::Signature)
    );
    let body = enc(claims(NOW).to_string().as_bytes());
    for alg in ["none", "HS256", "RS384", "PS256"] {
        let head = enc(json!({"alg": alg, "kid": "k1"}).to_string().as_bytes());
        let forged = format!("{head}.{body}.{}", enc(b"whatever"));
        assert_eq!(header(&forged), Err(Refusal::Algorithm(alg.to_owned())));
        assert_eq!(
            verify(&forged, &signer.key("k1"), &expected(NOW)),
            Err(Refusal::Algorithm(alg.to_owned()))
        );
    }
    // A payload changed after signing.
    let good = signer.token(&json!({"alg": "ES256"}), &claims(NOW));
    let mut parts: Vec<&str> = good.split('.').collect();
    let mut changed = claims(NOW);
    changed["groups"] = json!(["admins"]);
    let changed = enc(changed.to_string().as_bytes());
    parts[1] = &changed;
    assert_eq!(
        verify(&parts.join("."), &signer.key("k1"), &expected(NOW)),
        Err(Refusal::Signature)
    );
}

#[test]
fn groups_may_sit_in_a_nested_claim_or_be_one_string() {
    let signer = Signer::new();
    let mut c = claims(NOW);
    c["realm_access"] = json!({"roles": ["x", "y"]});
    c["team"] = json!("solo");
    let token = signer.token(&json!({"alg": "ES256"}), &c);
    let nested = Expected {
        groups_claim: "realm_access.roles",
        ..expected(NOW)
    };
    assert_eq!(
        verify(&token, &signer.key("k"), &nested).unwrap().groups,
        ["x", "y"]
    );
    let single = Expected {
        groups_claim: "team",
        ..expected(NOW)
    };
    assert_eq!(
        verify(&token, &signer.key("k"), &single).unwrap().groups,
        ["solo"]
    );
}

#[test]
fn the_jwks_keeps_only_keys_that_check_an_accepted_algorithm() {
    let signer = Signer::new();
    let document = json!({"keys": [
        signer.jwk("ec"),
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {"kty": "RSA", "kid": "small", "n": enc(&[0xc3; 128]), "e": "AQAB"},
        {"kty": "RSA", "kid": "big", "n": enc(&[0xc3; 256]), "e": "AQAB", "alg": "RS256"},
        {"kty": "RSA", "kid": "enc", "n": enc(&[0xc3; 256]), "e": "AQAB", "use": "enc"},
        {"kty": "EC", "crv": "P-384", "kid": "p384", "x": "AA", "y": "AA"},
        "not an object"
    ]});
    let kids: Vec<_> = keys_of_jwks(document.to_string().as_bytes())
        .unwrap()
        .into_iter()
        .map(|key| key.kid.unwrap())
        .collect();
    assert_eq!(kids, ["ec", "big"]);
    assert!(keys_of_jwks(b"[]").is_err());
}

/// A 2048-bit RSA key made for these tests only (PKCS #8, DER, base64): ring makes no RSA keys.
const RSA_TEST_KEY: &str = include_str!("rsa_test_key.pk8.b64");

fn rsa_pair() -> RsaKeyPair {
    let der = base64::engine::general_purpose::STANDARD
        .decode(RSA_TEST_KEY.trim())
        .unwrap();
    RsaKeyPair::from_pkcs8(&der).unwrap()
}

fn rs256_token(pair: &RsaKeyPair, header: &Value, claims: &Value) -> String {
    let signed = format!(
        "{}.{}",
        enc(header.to_string().as_bytes()),
        enc(claims.to_string().as_bytes())
    );
    let mut signature = vec![0; pair.public().modulus_len()];
    pair.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        signed.as_bytes(),
        &mut signature,
    )
    .unwrap();
    format!("{signed}.{}", enc(&signature))
}

fn rsa_key(pair: &RsaKeyPair, kid: &str) -> VerifyingKey {
    let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
    let document = json!({"keys": [{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
        "n": enc(&public.n), "e": enc(&public.e)}]});
    keys_of_jwks(document.to_string().as_bytes())
        .unwrap()
        .remove(0)
}

#[test]
fn rs256_tokens_verify_with_their_rsa_key_and_no_key_serves_another_algorithm() {
    let pair = rsa_pair();
    let key = rsa_key(&pair, "r1");
    assert_eq!(key.algorithm, Algorithm::Rs256);
    let token = rs256_token(&pair, &json!({"alg": "RS256", "kid": "r1"}), &claims(NOW));
    assert_eq!(verify(&token, &key, &expected(NOW)).unwrap().name, "alice");

    // The RSA signature presented as ES256, or checked with an EC key: refused.
    let ec = Signer::new().key("r1");
    assert_eq!(verify(&token, &ec, &expected(NOW)), Err(Refusal::Signature));
    let relabelled = format!(
        "{}.{}",
        enc(json!({"alg": "ES256", "kid": "r1"}).to_string().as_bytes()),
        token.split_once('.').unwrap().1
    );
    assert_eq!(
        verify(&relabelled, &key, &expected(NOW)),
        Err(Refusal::Signature)
    );
    assert_eq!(
        verify(&relabelled, &ec, &expected(NOW)),
        Err(Refusal::Signature)
    );
}

#[test]
fn what_a_refusal_shows_of_the_token_is_short_and_printable() {
    let long = format!("\n\u{1b}[31m{}", "A".repeat(500));
    let head = enc(json!({"alg": long}).to_string().as_bytes());
    let Err(Refusal::Algorithm(shown)) = header(&format!("{head}.e30.AA")) else {
        panic!("an unknown algorithm is refused");
    };
    assert!(
        shown.len() < 80 && !shown.chars().any(char::is_control),
        "{shown}"
    );
}
