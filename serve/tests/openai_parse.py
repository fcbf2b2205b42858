"""The official `openai` client's structured outputs against a running tl serve.

Usage: python openai_parse.py BASE_URL MODEL
`client.chat.completions.parse(..., response_format=Model)` with ten Pydantic models of
varied shape (nested objects, arrays, enums, bounded numbers, optional fields, a list of
nested objects, a literal, a recursive-free $defs reuse): each must come back as a parsed
instance of its model, validated by Pydantic itself. Then the same through streaming, a
`finish_reason: "length"` that the client raises on, and a bad schema that is a 400.
Prints one line per check; exits non-zero on any failure.
"""

import enum
import sys
from typing import List, Literal, Optional

import openai
from pydantic import BaseModel, Field


class Colour(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=130)


class Address(BaseModel):
    street: str = Field(max_length=60)
    city: City


class Customer(BaseModel):
    person: Person
    address: Address


class Shopping(BaseModel):
    items: List[str] = Field(max_length=5)


class Paint(BaseModel):
    colour: Colour
    litres: float = Field(ge=0.5, le=20)


class Rating(BaseModel):
    film: str = Field(max_length=60)
    stars: int = Field(ge=1, le=5)
    comment: Optional[str] = Field(default=None, max_length=80)


class Team(BaseModel):
    members: List[Person] = Field(max_length=3)


class Answer(BaseModel):
    verdict: Literal["yes", "no"]
    confidence: float = Field(ge=0, le=1)


class Flags(BaseModel):
    vegetarian: bool
    spicy: bool
    allergens: List[str] = Field(max_length=4)


class Trip(BaseModel):
    origin: City
    destination: City
    nights: int = Field(ge=1, le=30)


CASES = [
    (City, "Name a city in France and its country."),
    (Person, "Invent a person with a name and an age."),
    (Customer, "Invent a customer: a person and their address."),
    (Shopping, "List three things to buy at a grocery shop."),
    (Paint, "Pick a paint colour and how many litres to buy."),
    (Rating, "Rate the film Jaws."),
    (Team, "Invent a team of two people."),
    (Answer, "Is Paris the capital of France?"),
    (Flags, "Describe a margherita pizza's dietary flags."),
    (Trip, "Plan a trip from London to Rome."),
]


def main() -> None:
    base, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=300)
    system = {"role": "system", "content": "You answer with JSON only."}
    for cls, question in CASES:
        r = client.chat.completions.parse(
            model=model, messages=[system, {"role": "user", "content": question}], response_format=cls,
            seed=1, temperature=0, max_tokens=200)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "stop", r
        assert msg.refusal is None, msg
        assert isinstance(msg.parsed, cls), msg
        # Pydantic's own validation of the raw text agrees with the parsed object.
        assert cls.model_validate_json(msg.content) == msg.parsed, msg.content
        print("parsed ok:", cls.__name__, msg.content)

    # Streaming: the same request, streamed, gives the same text and the same object.
    cls, question = CASES[2]
    msgs = [system, {"role": "user", "content": question}]
    plain = client.chat.completions.parse(model=model, messages=msgs, response_format=cls, seed=3,
                                          temperature=0.7, max_tokens=200)
    with client.chat.completions.stream(model=model, messages=msgs, response_format=cls, seed=3,
                                        temperature=0.7, max_tokens=200) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert final.choices[0].message.content == plain.choices[0].message.content, (final, plain)
    assert final.choices[0].message.parsed == plain.choices[0].message.parsed
    print("streamed parse ok")

    # finish_reason "length" passes through: the client raises as it does against OpenAI.
    try:
        client.chat.completions.parse(model=model, messages=msgs, response_format=cls, seed=1, temperature=0,
                                      max_tokens=5)
        raise AssertionError("a cut-off structured answer was parsed")
    except openai.LengthFinishReasonError:
        pass
    print("length ok")

    # A schema the engine cannot compile: 400 on response_format, with its message.
    bad = {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "integer", "minimum": 5,
                                                                            "maximum": 1}}}
    try:
        client.chat.completions.create(model=model, messages=msgs, response_format=bad, max_tokens=5)
        raise AssertionError("a bad schema was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body.get("param") == "response_format", e.body
    print("bad schema ok")


if __name__ == "__main__":
    main()
