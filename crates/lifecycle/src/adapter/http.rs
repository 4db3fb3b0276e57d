//! HTTP adapters: one request per call to the manifest's server. Arguments fill the path
//! (percent-encoded as segment text: `/`, `?`, `#`, `@` and `:` cannot escape it; `.` and `..`
//! segments are refused), query values (form-encoded), header values and the body. The built
//! URL must keep the base's scheme, host, port and path prefix; redirects are not followed and
//! proxies are not used, so an argument can never send the request elsewhere.

use std::io::Read;
use std::time::Instant;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use quiver_abi::{ErrorCode, ToolError};
use quiver_catalog::CallSink;
use quiver_manifest::{HttpAdapter, check_base_url};
use reqwest::Url;
use reqwest::blocking::Client;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

use super::{MAX_OUTPUT_BYTES, Resolved, ToolPlan, excerpt, mapped_error, parse_output, payload};

/// Everything but the unreserved characters is encoded in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

pub(crate) struct HttpRunner {
    base_url: String,
    base_url_setting: Option<String>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Built on the first call (on a call thread: the blocking client cannot be built or
    /// dropped on an async task, and in a worker its threads start inside the sandbox).
    client: std::sync::OnceLock<Result<Client, String>>,
}

impl Drop for HttpRunner {
    /// The blocking client owns a runtime that must not be dropped on an async task (a hot
    /// swap may drop the adapter there): it goes on a thread of its own.
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = std::thread::Builder::new().name("quiver-adapter-drop".into()).spawn(move || drop(c));
        }
    }
}

impl HttpRunner {
    pub(crate) fn new(spec: &HttpAdapter, resolved: &Resolved) -> Result<HttpRunner, String> {
        let base_url = check_base_url(&spec.base_url).map_err(|e| format!("adapter.http.base_url: {e}"))?;
        let mut headers = Vec::new();
        for (k, v) in &resolved.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header `{k}`: {e}"))?;
            let mut value = HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        Ok(HttpRunner {
            base_url,
            base_url_setting: spec.base_url_setting.clone(),
            headers,
            client: Default::default(),
        })
    }

    fn client(&self) -> Result<&Client, ToolError> {
        self.client
            .get_or_init(|| {
                crate::install_tls_provider();
                Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .user_agent(concat!("quiver-adapter/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| format!("cannot set up the HTTP client: {e}"))
            })
            .as_ref()
            .map_err(|e| ToolError::tool(e.clone()))
    }

    /// The base URL of a call: the operator's setting when present, else the manifest's.
    fn base(&self, config: &Value) -> Result<String, ToolError> {
        match self.base_url_setting.as_ref().and_then(|k| config.get(k).map(|v| (k, v))) {
            Some((k, Value::String(s))) => check_base_url(s).map_err(|e| {
                ToolError::tool(format!("plugin_config `{k}` is not a usable base URL: {e}; fix it in quiver.yaml"))
            }),
            Some((k, _)) => {
                Err(ToolError::tool(format!("plugin_config `{k}` must be a URL string; fix it in quiver.yaml")))
            }
            None => Ok(self.base_url.clone()),
        }
    }

    /// The request URL: base + rendered path + query, checked to stay on the base's origin.
    pub(crate) fn url(base: &str, plan: &ToolPlan, args: &Value) -> Result<Url, ToolError> {
        let base_url =
            Url::parse(base).map_err(|e| ToolError::tool(format!("the base URL `{base}` does not parse: {e}")))?;
        let path = match &plan.path {
            Some(t) => t
                .render(args, |v| utf8_percent_encode(v, SEGMENT).to_string())
                .ok_or_else(|| ToolError::invalid("an argument the request path needs is missing; pass it"))?,
            None => "/".to_owned(),
        };
        for seg in path.split('/') {
            let decoded = percent_decode_str(seg).decode_utf8_lossy();
            if decoded == "." || decoded == ".." {
                return Err(ToolError::invalid(
                    "a path argument cannot be `.` or `..` (it would leave the adapter's path); pass a name",
                ));
            }
        }
        let mut url = Url::parse(&format!("{base}{path}"))
            .map_err(|e| ToolError::invalid(format!("the arguments do not make a valid URL: {e}")))?;
        let same_origin = url.scheme() == base_url.scheme()
            && url.host_str() == base_url.host_str()
            && url.port_or_known_default() == base_url.port_or_known_default()
            && url.path().starts_with(base_url.path().trim_end_matches('/'));
        if !same_origin {
            return Err(ToolError::new(
                ErrorCode::PERMISSION_DENIED,
                format!("the request would leave {base}; arguments cannot change the adapter's server or base path"),
            ));
        }
        {
            let mut pairs = url.query_pairs_mut();
            for (k, t) in &plan.query {
                if let Some(v) = t.render(args, str::to_owned) {
                    pairs.append_pair(k, &v);
                }
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        Ok(url)
    }

    pub(crate) fn run(
        &self,
        plan: &ToolPlan,
        args: &Value,
        config: &Value,
        deadline: Instant,
        sink: &dyn CallSink,
    ) -> Result<Value, ToolError> {
        let base = self.base(config)?;
        let url = Self::url(&base, plan, args)?;
        let method = plan.invoke.method.unwrap_or_default();
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() || sink.is_cancelled() {
            return Err(ToolError::new(ErrorCode::TIMEOUT, "the deadline passed before the request was sent"));
        }
        let m = reqwest::Method::from_bytes(method.as_str().as_bytes())
            .map_err(|e| ToolError::tool(format!("method {}: {e}", method.as_str())))?;
        let client = self.client()?;
        let mut req = client.request(m, url.clone()).timeout(remaining);
        for (k, v) in &self.headers {
            req = req.header(k.clone(), v.clone());
        }
        for (k, t) in &plan.headers {
            if let Some(v) = t.render(args, str::to_owned) {
                let value = HeaderValue::from_str(&v).map_err(|_| {
                    ToolError::invalid(format!(
                        "the value for header `{k}` has characters a header cannot carry (line breaks, control characters); remove them"
                    ))
                })?;
                req = req.header(k.as_str(), value);
            }
        }
        if let Some(p) = &plan.invoke.body {
            let (bytes, content_type) = payload(p, args);
            req = req.header(reqwest::header::CONTENT_TYPE, content_type).body(bytes);
        }
        let origin = format!("{}://{}", url.scheme(), url.authority());
        let resp = req.send().map_err(|e| {
            if e.is_timeout() {
                // The router decides, for every backend alike, whether a timeout is retryable.
                ToolError::new(ErrorCode::TIMEOUT, format!("{origin} did not answer before the deadline")).retryable()
            } else if e.is_connect() {
                // No connection: nothing was sent.
                ToolError::tool(format!("cannot reach {origin}: {e}")).retryable()
            } else {
                plan.maybe_acted(ToolError::tool(format!("the request to {origin} failed: {e}")))
            }
        })?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        resp.take(MAX_OUTPUT_BYTES as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|e| plan.maybe_acted(ToolError::tool(format!("reading the answer of {origin} failed: {e}"))))?;
        let ok = (200..300).contains(&status) || plan.invoke.ok.contains(&status);
        if !ok {
            // 429 and 503 refuse a request without acting on it; any other server error may
            // come after the server acted.
            let refused = status == 429 || status == 503;
            let e = mapped_error(
                &plan.invoke,
                status,
                format!(
                    "{} {} answered HTTP {status}: {}",
                    method.as_str(),
                    url.path(),
                    excerpt(&String::from_utf8_lossy(&body))
                ),
                refused,
            );
            return Err(if status >= 500 && !refused { plan.maybe_acted(e) } else { e });
        }
        if body.len() > MAX_OUTPUT_BYTES {
            return Err(ToolError::tool(format!(
                "{origin} answered more than {MAX_OUTPUT_BYTES} bytes; narrow the request"
            )));
        }
        parse_output(plan.invoke.output, &body, &format!("the answer of {origin}"))
    }
}
