//! `question`: the model asks the person it works for, with suggested answers to pick from.
//! Who answers is a [`UserChannel`] on the context; without one the model is told to carry
//! on by its own judgement.

use std::future::Future;
use std::io::{BufRead, Write};
use std::pin::Pin;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolResult};
use runner_permission::PermissionRequest;

/// One suggested answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionOption {
    /// The answer as the user would pick it (1-5 words)
    pub label: String,
    /// What choosing it means
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Question {
    /// The full question
    pub question: String,
    /// A very short label for the question (a few words)
    pub header: String,
    /// Suggested answers; the user may also type their own
    pub options: Vec<QuestionOption>,
    /// True if the user may pick more than one option
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub multiple: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct QuestionParams {
    /// The questions to ask, in order
    pub questions: Vec<Question>,
}

/// The answers per question, in the questions' order: the chosen labels, or free text.
pub type Answers = Vec<Vec<String>>;

pub type AnswerFuture<'a> = Pin<Box<dyn Future<Output = Result<Answers, ToolError>> + Send + 'a>>;

/// Someone who can answer the model's questions: the terminal, a UI, a harness. An error
/// ends the call (e.g. [`ToolError::Permission`] with feedback when the person dismisses
/// the questions, [`ToolError::Cancelled`]).
pub trait UserChannel: Send + Sync {
    fn ask<'a>(&'a self, questions: &'a [Question]) -> AnswerFuture<'a>;
}

pub struct QuestionTool;

impl Tool for QuestionTool {
    type Params = QuestionParams;

    fn id(&self) -> &'static str {
        "question"
    }

    fn description(&self) -> &'static str {
        include_str!("question.txt")
    }

    async fn permissions(
        &self,
        _params: &QuestionParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(vec![PermissionRequest::new(
            "question",
            vec!["*".into()],
            vec!["*".into()],
        )])
    }

    async fn execute(&self, params: QuestionParams, ctx: &ToolContext) -> ToolResult {
        if params.questions.is_empty() {
            return Err(ToolError::Failed(
                "Give at least one question to ask.".into(),
            ));
        }
        if let Some(q) = params
            .questions
            .iter()
            .find(|q| q.question.trim().is_empty())
        {
            return Err(ToolError::Failed(format!(
                "The question with header {:?} has no text; write out the question itself.",
                q.header
            )));
        }
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let n = params.questions.len();
        let title = format!("Asked {n} question{}", if n == 1 { "" } else { "s" });
        let Some(user) = ctx.services.user.as_ref() else {
            return Ok(ToolOutput {
                title,
                output: "Nobody is available to answer questions in this session, so none were asked. Continue on your own best judgement: pick the option that seems most reasonable, and say clearly which assumptions you made so the user can correct them later.".into(),
                metadata: crate::meta! { "answered" => false },
                attachments: Vec::new(),
            });
        };
        let answers = tokio::select! {
            answers = user.ask(&params.questions) => answers?,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let pairs: Vec<String> = params
            .questions
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let answer = match answers.get(i) {
                    Some(a) if !a.is_empty() => a.join(", "),
                    _ => "(no answer)".to_string(),
                };
                format!("{:?}={:?}", q.question, answer)
            })
            .collect();
        Ok(ToolOutput {
            title,
            output: format!(
                "User answered: {}. Go on with these answers in mind.",
                pairs.join(", ")
            ),
            metadata: crate::meta! { "answered" => true, "answers" => answers },
            attachments: Vec::new(),
        })
    }
}

/// Asks at the terminal: each question with its numbered options goes to stderr, and one
/// line is read from `/dev/tty` per question (stdout and stdin may be pipes).
#[derive(Debug, Default)]
pub struct TerminalUser;

/// One person at one terminal: questions from concurrent calls are asked one at a time.
static TERMINAL_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl UserChannel for TerminalUser {
    fn ask<'a>(&'a self, questions: &'a [Question]) -> AnswerFuture<'a> {
        let questions = questions.to_vec();
        Box::pin(async move {
            let turn = TERMINAL_TURN.lock().await;
            let answers = tokio::task::spawn_blocking(move || {
                let tty = std::fs::File::options()
                    .read(true)
                    .open("/dev/tty")
                    .map_err(|e| {
                        ToolError::Failed(format!(
                            "Cannot ask the user: no terminal to read the answer from ({e}). Continue on your own best judgement and state your assumptions."
                        ))
                    })?;
                let mut input = std::io::BufReader::new(tty);
                ask_lines(&questions, &mut input, &mut std::io::stderr().lock())
            })
            .await
            .map_err(|e| ToolError::Failed(format!("The terminal prompt failed: {e}")))?;
            drop(turn);
            answers
        })
    }
}

/// Renders each question, reads one line per question and turns it into the answer.
fn ask_lines(
    questions: &[Question],
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<Answers, ToolError> {
    let io_err = |e: std::io::Error| ToolError::Failed(format!("Cannot ask the user: {e}"));
    let mut answers = Vec::with_capacity(questions.len());
    for q in questions {
        out.write_all(render(q).as_bytes()).map_err(io_err)?;
        out.flush().map_err(io_err)?;
        let mut line = String::new();
        if input.read_line(&mut line).map_err(io_err)? == 0 {
            return Err(ToolError::Failed(
                "The user closed the terminal without answering. Continue on your own best judgement and state your assumptions.".into(),
            ));
        }
        answers.push(parse_answer(&line, q));
    }
    Ok(answers)
}

/// The model wrote every word of a question, so all of it is escaped for the terminal.
fn render(q: &Question) -> String {
    use runner_display::escape;
    let mut s = format!(
        "\n[{}] {}\n",
        escape(q.header.trim()),
        escape(q.question.trim())
    );
    for (i, o) in q.options.iter().enumerate() {
        if o.description.trim().is_empty() {
            s.push_str(&format!("  {}. {}\n", i + 1, escape(&o.label)));
        } else {
            s.push_str(&format!(
                "  {}. {} - {}\n",
                i + 1,
                escape(&o.label),
                escape(&o.description)
            ));
        }
    }
    let how = match (q.options.is_empty(), q.multiple) {
        (true, _) => "Type your answer",
        (false, false) => "Type a number, or your own answer",
        (false, true) => "Type numbers separated by commas, or your own answer",
    };
    s.push_str(&format!("{how}: "));
    s
}

/// Option numbers (one, or a comma-separated list when the question allows several) become
/// their labels; anything else is the user's own answer. An empty line is no answer.
fn parse_answer(line: &str, q: &Question) -> Vec<String> {
    let line = line.trim();
    if line.is_empty() {
        return Vec::new();
    }
    let picks: Option<Vec<usize>> = line
        .split(',')
        .map(|part| {
            part.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=q.options.len()).contains(n))
        })
        .collect();
    match picks {
        Some(picks) if q.multiple || picks.len() == 1 => {
            let mut labels: Vec<String> = Vec::new();
            for n in picks {
                let label = &q.options[n - 1].label;
                if !labels.contains(label) {
                    labels.push(label.clone());
                }
            }
            labels
        }
        _ => vec![line.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::json;

    use super::*;
    use crate::Registry;
    use crate::registry::Outcome;
    use crate::testing::{TestCtx, ask};

    struct Fixed {
        answers: Answers,
        seen: Mutex<Vec<Question>>,
    }

    impl UserChannel for Fixed {
        fn ask<'a>(&'a self, questions: &'a [Question]) -> AnswerFuture<'a> {
            self.seen.lock().unwrap().extend_from_slice(questions);
            Box::pin(std::future::ready(Ok(self.answers.clone())))
        }
    }

    fn two_questions() -> serde_json::Value {
        json!({ "questions": [
            {
                "question": "Which database?",
                "header": "Database",
                "options": [
                    { "label": "Postgres", "description": "the server one" },
                    { "label": "SQLite", "description": "a file" },
                ],
            },
            {
                "question": "Which features?",
                "header": "Features",
                "options": [
                    { "label": "Auth", "description": "" },
                    { "label": "Search", "description": "" },
                ],
                "multiple": true,
            },
        ] })
    }

    #[tokio::test]
    async fn answers_from_the_channel_are_reported() {
        let t = TestCtx::new().await;
        let user = Arc::new(Fixed {
            answers: vec![vec!["SQLite".into()], vec!["Auth".into(), "Search".into()]],
            seen: Mutex::new(Vec::new()),
        });
        let ctx = t.ctx.clone().with_user(user.clone());
        let r = Registry::builtin()
            .call("question", two_questions(), &ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, "Asked 2 questions");
        assert_eq!(
            r.output,
            "User answered: \"Which database?\"=\"SQLite\", \"Which features?\"=\"Auth, Search\". Go on with these answers in mind."
        );
        assert_eq!(
            r.metadata["answers"],
            json!([["SQLite"], ["Auth", "Search"]])
        );
        let seen = user.seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert!(seen[1].multiple && !seen[0].multiple);
        assert_eq!(t.asks(), vec![ask("question", &["*"], &["*"])]);
    }

    #[tokio::test]
    async fn a_missing_answer_is_said_to_be_missing() {
        let t = TestCtx::new().await;
        let user = Arc::new(Fixed {
            answers: vec![vec!["Postgres".into()]],
            seen: Mutex::new(Vec::new()),
        });
        let ctx = t.ctx.clone().with_user(user);
        let r = Registry::builtin()
            .call("question", two_questions(), &ctx)
            .await;
        assert!(
            r.output.contains("\"Which features?\"=\"(no answer)\""),
            "{}",
            r.output
        );
    }

    #[tokio::test]
    async fn without_a_user_the_model_is_told_to_decide() {
        let t = TestCtx::new().await;
        let r = Registry::builtin()
            .call("question", two_questions(), &t.ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, "Asked 2 questions");
        assert!(r.output.starts_with("Nobody is available"), "{}", r.output);
        assert!(r.output.contains("assumptions"));
        assert_eq!(r.metadata["answered"], json!(false));
    }

    #[tokio::test]
    async fn no_questions_is_an_error() {
        let t = TestCtx::new().await;
        let r = Registry::builtin()
            .call("question", json!({ "questions": [] }), &t.ctx)
            .await;
        assert_eq!(r.outcome, Outcome::Failed);
    }

    #[test]
    fn terminal_lines_become_labels_or_free_text() {
        let q: Vec<Question> =
            serde_json::from_value(two_questions()["questions"].clone()).unwrap();
        assert_eq!(parse_answer("2\n", &q[0]), ["SQLite"]);
        assert_eq!(parse_answer(" 2, 1 ,2", &q[1]), ["Search", "Auth"]);
        // Several numbers for a single-choice question, or a number out of range, are text.
        assert_eq!(parse_answer("1,2", &q[0]), ["1,2"]);
        assert_eq!(parse_answer("3", &q[0]), ["3"]);
        assert_eq!(parse_answer("MySQL please", &q[0]), ["MySQL please"]);
        assert!(parse_answer("  \n", &q[0]).is_empty());

        let mut input = std::io::Cursor::new(b"1\nAuth only\n".to_vec());
        let mut out = Vec::new();
        let answers = ask_lines(&q, &mut input, &mut out).unwrap();
        assert_eq!(
            answers,
            vec![vec!["Postgres".to_string()], vec!["Auth only".into()]]
        );
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.contains(
                "[Database] Which database?\n  1. Postgres - the server one\n  2. SQLite - a file\n"
            ),
            "{shown}"
        );
        assert!(shown.contains("  1. Auth\n"), "{shown}");
        assert!(shown.contains("numbers separated by commas"), "{shown}");

        // The terminal closing before every question is answered is an error.
        let mut input = std::io::Cursor::new(b"1\n".to_vec());
        assert!(ask_lines(&q, &mut input, &mut Vec::new()).is_err());
    }

    /// Every word of a question is the model's: a title-setting OSC or a line-erasing
    /// sequence in it reaches the terminal as visible text.
    #[test]
    fn a_question_shows_its_escapes() {
        let q = Question {
            question: "Deploy?\x1b]0;owned\x07".into(),
            header: "\x1b[2KRelease".into(),
            options: vec![QuestionOption {
                label: "yes\r\x1b[1A".into(),
                description: "\u{9b}2Kship it".into(),
            }],
            multiple: false,
        };
        let text = render(&q);
        assert!(!text.chars().any(runner_display::is_unsafe), "{text:?}");
        for want in [
            "[\\e[2KRelease] Deploy?\\e]0;owned\\a",
            "1. yes\\r\\e[1A - \\u{9b}2Kship it",
        ] {
            assert!(text.contains(want), "{want:?} not in {text:?}");
        }
    }
}
