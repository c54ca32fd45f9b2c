//! The page: one HTML file, its script and its style, compiled into the binary (no build
//! step, no files beside the binary). Pages are views of one script, switched by the URL's
//! fragment (`#/topics`), so every path but these few is the API's or a 404.

use tern_shell::http::Response;

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// The asset at `path`, or a 404.
pub fn serve(path: &str) -> Response {
    let (kind, body) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX),
        "/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/app.css" => ("text/css; charset=utf-8", STYLE),
        _ => return Response::plain(404, "not found\n"),
    };
    Response::ok(kind, body)
        .header("Cache-Control", "no-cache")
        .header("X-Content-Type-Options", "nosniff")
        .header("X-Frame-Options", "DENY")
        .header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'",
        )
}
