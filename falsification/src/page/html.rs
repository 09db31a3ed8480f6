//! Pure: what every page shares: the document around a body (its one inline stylesheet, for a
//! phone's width and for print), the verdict's box and words, figure cells, a record's Markdown.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use falsification_model::outcome::Judgement;

/// The page's only style: no external font, script or sheet, so it opens from disk anywhere.
const STYLE: &str = "
:root{--fg:#1b1b1b;--muted:#555;--line:#d0d0d0;--held:#0a6b2e;--refuted:#a1141a;--open:#8a5a00}
*{box-sizing:border-box}
body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);
margin:0 auto;padding:1rem;max-width:1100px}
h1{font-size:1.5rem;margin:.2rem 0 .6rem}h2{font-size:1.25rem;margin:2rem 0 .5rem;
border-bottom:1px solid var(--line)}h3{font-size:1.05rem;margin:1.2rem 0 .3rem}
p,li{max-width:75ch}code,pre{font:13px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{background:#f5f5f5;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:.4rem 0;font-size:14px}
th,td{border:1px solid var(--line);padding:.25rem .5rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f2f2f2}
td.out{background:#fde8e8;font-weight:700}
.verdict{border-left:6px solid var(--open);padding:.5rem .8rem;margin:.6rem 0;background:#fafafa}
.verdict.held{border-color:var(--held)}.verdict.refuted{border-color:var(--refuted)}
.word{font-weight:700;text-transform:uppercase;letter-spacing:.04em}
.held .word{color:var(--held)}.refuted .word{color:var(--refuted)}
.inconclusive .word,.incomplete .word{color:var(--open)}
ul.config{padding-left:1.1rem;margin:.3rem 0}.muted{color:var(--muted);font-size:13px}
figure{margin:1rem 0;break-inside:avoid}figcaption{font-weight:600;margin-bottom:.2rem}
svg{max-width:100%;height:auto;display:block}
details{margin:1rem 0}summary{cursor:pointer;font-weight:600}
@media (max-width:600px){body{padding:.5rem;font-size:14px}table{font-size:12px}
figure{overflow-x:auto}figure svg{min-width:720px}}
@media print{body{max-width:none;font-size:11pt}details{display:block}
details>*{display:block}a{color:inherit;text-decoration:none}figure,table{break-inside:avoid}}
";

/// A whole document: `title` in the head, `body` inside.
pub fn document(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body { (body) }
        }
    }
    .into_string()
}

/// What a verdict means for a claim, in words for a reader outside the team.
pub fn meaning(j: Judgement) -> &'static str {
    match j {
        Judgement::Held => {
            "the claim held: the run did what the claim predicts, and nothing it measured is \
             what would refute it"
        }
        Judgement::Refuted => {
            "the claim is refuted by this run: it measured what the claim says cannot happen"
        }
        Judgement::Inconclusive => {
            "this run cannot decide the claim either way (see why below); it is not evidence \
             for or against it"
        }
        Judgement::Incomplete => "the run stopped before its end: there is no verdict",
    }
}

/// What a case's verdict says about this case: the verdict, and the publication's figure for it
/// when the record has it.
pub struct Verdict<'a> {
    pub name: String,
    pub judgement: Judgement,
    pub reason: &'a str,
    pub published: Option<&'a str>,
}

/// The verdict's box: the word, what it means, the publication's figure for this case, why.
pub fn verdict_box(v: &Verdict) -> Markup {
    let j = v.judgement;
    html! {
        div class={ "verdict " (j.word()) } {
            strong { (&v.name) ": " } span.word { (j.word()) } " — " (meaning(j)) "."
            @if let Some(p) = v.published {
                br; "The publication's figure for this case: " (p) "."
            }
            @if !v.reason.is_empty() { br; span.muted { "Why: " (v.reason) } }
        }
    }
}

/// A record's own Markdown, as HTML (pulldown-cmark escapes what it does not render).
pub fn markdown(md: &str) -> Markup {
    let mut options = pulldown_cmark::Options::empty();
    options.insert(pulldown_cmark::Options::ENABLE_TABLES);
    let parser = pulldown_cmark::Parser::new_ext(md, options).map(|e| match e {
        // Raw HTML in a record stays text: the page runs nothing it did not write.
        pulldown_cmark::Event::Html(s) | pulldown_cmark::Event::InlineHtml(s) => {
            pulldown_cmark::Event::Text(s)
        }
        e => e,
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, parser);
    // Wide tables scroll on a phone instead of widening the page.
    let out = out
        .replace("<table>", "<div class=\"scroll\"><table>")
        .replace("</table>", "</table></div>");
    PreEscaped(out)
}

/// A chart's SVG as a figure with its caption.
pub fn figure(caption: &str, svg: String) -> Markup {
    html! {
        figure {
            figcaption { (caption) }
            (PreEscaped(svg))
        }
    }
}

/// A number as the page prints configuration: no trailing zeros.
pub fn num(x: f64) -> String {
    let t = format!("{x:.3}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A command line as a shell reads it back: each argument plain when it is, else single-quoted.
pub fn shell_line(argv: &[String]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c);
    argv.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(plain) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_html5_with_its_style_inline_and_text_escaped() {
        let page = document("a <b>", html! { p { "x & y" } });
        assert!(
            page.starts_with("<!DOCTYPE html><html lang=\"en\">"),
            "{page}"
        );
        assert!(page.contains("<title>a &lt;b&gt;</title>"));
        assert!(page.contains("<p>x &amp; y</p>"));
        assert!(!page.contains("<link") && !page.contains("<script"));
    }

    #[test]
    fn markdown_renders_tables_in_a_scroller_and_keeps_raw_html_as_text() {
        let md = "| a | b |\n|---|---|\n| 1 | 2 |\n\n<script>alert(1)</script>\n";
        let out = markdown(md).into_string();
        assert!(out.contains("<div class=\"scroll\"><table>"), "{out}");
        assert!(!out.contains("<script>"), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
    }

    #[test]
    fn a_command_line_reads_back_in_a_shell() {
        let argv = [
            "falsification",
            "trigger",
            "-H",
            "authorization: <redacted>",
            "it's",
        ];
        let argv: Vec<String> = argv.iter().map(ToString::to_string).collect();
        assert_eq!(
            shell_line(&argv),
            "falsification trigger -H 'authorization: <redacted>' 'it'\\''s'"
        );
        assert_eq!(num(20.0), "20");
        assert_eq!(num(0.125), "0.125");
    }

    #[test]
    fn every_verdict_says_what_it_means() {
        for j in [
            Judgement::Held,
            Judgement::Refuted,
            Judgement::Inconclusive,
            Judgement::Incomplete,
        ] {
            let v = Verdict {
                name: "F3 x".into(),
                judgement: j,
                reason: "because",
                published: Some("stays failed at 20 pods"),
            };
            let b = verdict_box(&v).into_string();
            assert!(b.contains(j.word()) && b.contains(meaning(j)), "{b}");
            assert!(
                b.contains("figure for this case: stays failed at 20 pods"),
                "{b}"
            );
        }
    }
}
