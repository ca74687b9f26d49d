"""Non-answers: an empty reply, a refusal or "I don't know" is not evidence of absence.

A method that counted such a reply as a wrong answer would turn a target that
refuses (or a filter that blanks replies) into a stream of "not found"
verdicts. Every method that reads answer text asks ``non_answer`` first and
treats a non-answer as missing data: a document with too many of them is
inconclusive, with the reason. Unparseable replies are the parser's business
(each method knows its own format) and are counted the same way by the caller.

The patterns are deliberately narrow (whole refusal or ignorance phrases near
the start of the reply): a genuine answer that happens to contain "sorry" later
on must still count as an answer. They cover English and the openings of the
same replies in nine other languages, since a target answers in the language
of the document it was asked about; a reply in another language that none of
them matches is read as an answer, and each method's own reader decides.
"""
from __future__ import annotations

import re

#: Which reading of replies this module gives. Bump it with any change that reads some reply differently (a
#: pattern widened or narrowed, another kind of non-answer): every calibration is saved with the revision it
#: was fitted under (``shadow.prepare.saved_calibration``) and reused only under the same one, so a threshold
#: set where "I'm unable to help" still counted as an answer is fitted again once it no longer does. Then fit
#: the shipped calibrations again (``scripts/build_default_preparation.py --recalibrate``) and record the
#: reader's new fingerprint in tests/audit_core/test_non_answers.py; tests fail until both are done.
#: "1": the reader of ef0fd3a (nine languages, empty replies); "2": session 55's (wider English refusal
#: openings, e.g. "I'm unable to", "I apologize, but"; "I apologize to my family" an answer again); "3": session
#: 60's (refusals to quote, repeat, find or recall, "I do not have the rest of that message", "I couldn't find",
#: "no idea", "idk", a bare "Sorry!"; "I declined the surgery" and "Apologize to your partner" answers again).
READER_REVISION = "3"

#: the reply opens with (or, when short, consists of) one of these
_REFUSAL = re.compile(
    r"^\W*(?:"
    r"i(?:'|\u2019)?m sorry|i am sorry|sorry,|sorry\W*$|apologies[,.!]|(?:i apologi[sz]e|my apologies),? (?:but|for)"
    r"|unfortunately,? i"
    # "I'm unable to" was once written "i (?:'m unable to)", which needs a space before the apostrophe
    r"|(?:sorry\W+(?:but )?|i(?:'|\u2019)?m afraid,? |i am afraid,? )?"
    r"i(?: can(?:'|\u2019)?t| cannot| am unable to| won(?:'|\u2019)?t(?: be able to)?"
    r"| am not able to|(?:'|\u2019)?m (?:unable|not able) to)"
    r" (?:help|assist|provide|answer|share|comply|complete|fulfil|continue|do that|disclose|reveal|reproduce"
    r"|quote|repeat|recite|find|locate|recall|access|retrieve)"
    r"|as an ai\b|i must decline|i decline\b"
    # the same openings in the languages an owner's documents (and so the target's replies) are most often in:
    # Spanish, French, German, Italian, Portuguese, Dutch, Russian, Chinese, Japanese
    r"|lo siento|no puedo (?:ayudar|proporcionar|responder|compartir|continuar)"
    r"|(?:je suis )?d[ée]sol[ée]e?\b|je ne peux pas (?:vous )?(?:aider|fournir|r[ée]pondre|partager|continuer)"
    r"|es tut mir leid"
    r"|leider kann ich|ich kann (?:ihnen |dir )?(?:dabei )?(?:nicht (?:helfen|antworten)|keine (?:antwort|auskunft))"
    r"|mi dispiace|non posso (?:aiutar|fornire|rispondere|condividere|continuare)"
    r"|desculp[ea]|sinto muito|lamento,|n[ãa]o posso (?:ajudar|fornecer|responder|partilhar|compartilhar|continuar)"
    r"|het spijt me|ik kan (?:je |u )?niet (?:helpen|antwoorden)"
    r"|извините|простите|я не могу (?:помочь|ответить|предоставить)"
    r"|(?:很)?抱歉|对不起|對不起|我(?:无法|無法|不能)(?:回答|提供|帮助|幫助|协助|協助)|申し訳|すみません"
    r")",
    re.IGNORECASE,
)
_IGNORANCE = re.compile(
    r"^\W*(?:"
    r"i (?:do not|don(?:'|\u2019)?t) know|i(?:'|\u2019)?m not sure|i am not sure|not sure\b|unknown\W*$"
    r"|(?:the )?(?:provided |given )?(?:context|documents?|information|text)(?: provided| given)?"
    r" (?:does not|do not|doesn(?:'|\u2019)?t|don(?:'|\u2019)?t) (?:contain|mention|say|include)"
    r"|i (?:do not|don(?:'|\u2019)?t) have (?:any |enough |the )?(?:information|access)\b"
    r"|i (?:do not|don(?:'|\u2019)?t) have (?:the rest of |the full |the complete )?(?:that|this|the|your) "
    r"(?:message|text|document|passage|quote)\b"
    r"|i (?:could not|couldn(?:'|\u2019)?t|was unable to|was not able to) (?:find|locate)\b"
    r"|(?:i have )?no idea(?:\W*$|[,.!])|idk\b|i(?:'|\u2019)?m not certain|i am not certain"
    r"|(?:that |this |the |such )?information is not available(?: in the (?:context|documents?|text))?\W*$"
    r"|there is no (?:information|mention)|no information\b|n/?a\W*$"
    r"|no lo s[ée]\b|no sé\b|no se\W*$|no estoy segur[oa]|no (?:tengo|hay) (?:informaci[óo]n|datos)"
    r"|je ne (?:le )?sais pas|je ne suis pas s[ûu]re?|(?:aucune|pas d')information"
    r"|ich wei(?:ß|ss) (?:es |das )?nicht|ich bin (?:mir )?nicht sicher|keine information|unbekannt\W*$"
    r"|non (?:lo )?so\b|non sono sicur[oa]|nessuna informazione"
    r"|n[ãa]o sei\b|n[ãa]o tenho certeza|n[ãa]o (?:tenho|h[áa]) informa[çc]"
    r"|ik weet (?:het |dat )?niet|geen informatie"
    r"|я не знаю|не знаю|нет информации"
    r"|我不知道|不知道|不清楚|没有(?:相关)?信息|沒有(?:相關)?資訊|わかりません|分かりません|知りません"
    r")",
    re.IGNORECASE,
)


def non_answer(text: str | None) -> str | None:
    """Why ``text`` is not an answer ("empty", "refusal", "I don't know"), or None for an answer."""
    if text is None or not text.strip() or not re.search(r"\w", text):
        return "empty"
    t = text.strip()
    if _REFUSAL.search(t):
        return "refusal"
    if _IGNORANCE.search(t):
        return "I don't know"
    return None


#: a document whose replies are more than this share non-answers is inconclusive
MAX_NON_ANSWER_SHARE = 0.5


def too_many_non_answers(kinds: list[str | None], max_share: float = MAX_NON_ANSWER_SHARE) -> str | None:
    """The inconclusive reason when more than ``max_share`` of a document's replies are non-answers.

    ``kinds`` has one entry per reply (or per hidden word): None for an answer,
    else the kind of non-answer ("empty", "refusal", "I don't know", "unparseable").
    """
    bad = [k for k in kinds if k is not None]
    if not kinds or len(bad) / len(kinds) <= max_share:
        return None
    counts: dict[str, int] = {}
    for k in bad:
        counts[k] = counts.get(k, 0) + 1
    detail = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return (f"too many non-answers: {len(bad)} of {len(kinds)} replies were not answers ({detail}); "
            f"a missing answer is not evidence that the document is absent")
