"use strict";
// A page's form as an endpoint's request, built from this service's OpenAPI document (the request's schemas, which
// the service writes into the page): each scalar field (and each
// list of scalars, typed comma-separated) with its description as help, the nested objects the page names a fieldset
// each; what a form cannot hold well stays the API's. The state is the page's address, to share.
window.explorerForm = (() => {
  let components = {};
  const $ = (id) => document.getElementById(id);
  // The service's path from a page under /explore/ (the service may be mounted below a prefix).
  const root = new URL("../", window.location.href).pathname;
  const api = (path) => root.replace(/\/$/, "") + path;

  function resolve(schema) {
    if (!schema) return {};
    if (schema.$ref) return resolve(components[schema.$ref.split("/").pop()]);
    const options = schema.anyOf || schema.oneOf;
    if (options) {
      const chosen = resolve(options.find((s) => s.type !== "null") || {});
      return { ...chosen, description: schema.description || chosen.description, default: schema.default };
    }
    return schema;
  }

  function scalar(schema) {
    return ["integer", "number", "string", "boolean"].includes(schema.type) || Array.isArray(schema.enum);
  }

  function listOfScalars(schema) {
    return schema.type === "array" && schema.items && scalar(resolve(schema.items));
  }

  function input(name, schema) {
    const id = "f-" + name.replace(/\./g, "-");
    const wrapper = document.createElement("div");
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = name + (listOfScalars(schema) ? " (comma-separated)" : "");
    let field;
    if (Array.isArray(schema.enum) || schema.type === "boolean") {
      field = document.createElement("select");
      field.appendChild(new Option("(default)", ""));
      (schema.enum || [true, false]).forEach((v) => field.appendChild(new Option(String(v), String(v))));
    } else {
      field = document.createElement("input");
      const numeric = schema.type === "integer" || schema.type === "number";
      field.type = numeric ? "number" : "text";
      if (numeric) field.step = schema.type === "integer" ? "1" : "any";
      if (schema.minimum !== undefined) field.min = schema.minimum;
      if (schema.maximum !== undefined) field.max = schema.maximum;
    }
    field.id = id;
    field.name = name;
    field.dataset.type = listOfScalars(schema) ? "list:" + (resolve(schema.items).type || "string") : schema.type || "string";
    wrapper.append(label, field);
    if (schema.description) {
      const help = document.createElement("small");
      help.id = id + "-help";
      help.textContent = schema.description;
      field.setAttribute("aria-describedby", help.id);
      wrapper.appendChild(help);
    }
    return wrapper;
  }

  function fieldset(legend, entries) {
    const set = document.createElement("fieldset");
    set.appendChild(Object.assign(document.createElement("legend"), { textContent: legend }));
    entries.forEach(([name, schema]) => {
      if (scalar(schema) || listOfScalars(schema)) set.appendChild(input(name, schema));
    });
    return set;
  }

  // The part of the OpenAPI document the page's forms are built from, which the service writes into the page.
  function schemas() {
    return JSON.parse($("request-schemas").textContent);
  }

  // schemaName's fields into container: `first` at the top in that order, `nested` objects a fieldset each, `omit`
  // left to the page. `source`: the OpenAPI document, or the part of it schemas() reads.
  function build(source, schemaName, container, { first = [], nested = [], omit = [], legend = "Request" } = {}) {
    components = source.components.schemas;
    const properties = components[schemaName].properties;
    const names = [...first.filter((n) => n in properties), ...Object.keys(properties).filter((n) => !first.includes(n))]
      .filter((n) => !omit.includes(n));
    const top = [], sets = [];
    names.forEach((name) => {
      const schema = resolve(properties[name]);
      if (nested.includes(name) && schema.properties) {
        sets.push([name, Object.entries(schema.properties).map(([child, raw]) => [name + "." + child, resolve(raw)])]);
      } else {
        top.push([name, schema]);
      }
    });
    container.appendChild(fieldset(legend, top));
    sets.forEach(([name, entries]) => container.appendChild(fieldset(name, entries)));
  }

  function fill(container, defaults) {
    const query = new URLSearchParams(window.location.search);
    const given = query.toString() ? Object.fromEntries(query) : defaults;
    container.querySelectorAll("[name]").forEach((field) => {
      if (given[field.name] !== undefined) field.value = String(given[field.name]);
    });
  }

  function parse(type, text) {
    if (type.startsWith("list:")) return text.split(",").map((t) => t.trim()).filter((t) => t).map((t) => parse(type.slice(5), t));
    if (type === "integer") return parseInt(text, 10);
    if (type === "number") return parseFloat(text);
    if (type === "boolean") return text === "true";
    return text;
  }

  // [the request body, the address's state] of the fields filled in.
  function read(container) {
    const body = {};
    const state = new URLSearchParams();
    container.querySelectorAll("[name]").forEach((field) => {
      if (field.value === "") return;
      state.set(field.name, field.value);
      const value = parse(field.dataset.type, field.value);
      const [head, tail] = field.name.split(".");
      if (tail) (body[head] = body[head] || {})[tail] = value;
      else body[head] = value;
    });
    return [body, state];
  }

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    if (Math.abs(value) >= 1) return value.toPrecision(3) + " s";
    if (Math.abs(value) >= 1e-3) return (value * 1e3).toPrecision(3) + " ms";
    return (value * 1e6).toPrecision(3) + " µs";
  }

  function number(value) {
    return value === null || value === undefined ? "–" : Number(value.toPrecision(4)).toLocaleString("en-US");
  }

  // POST a body; the answer, or an Error naming the fields the service refused.
  async function post(path, body) {
    const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
    const answer = await response.json();
    if (!response.ok) {
      const where = answer.fields && answer.fields.length ? " (" + answer.fields.map((f) => f.loc + ": " + f.msg).join("; ") + ")" : "";
      throw new Error((answer.detail || response.statusText) + where);
    }
    return answer;
  }

  function row(cells) {
    const tr = document.createElement("tr");
    cells.forEach((text, i) => {
      const cell = document.createElement(i === 0 ? "th" : "td");
      if (i === 0) cell.scope = "row";
      cell.textContent = text;
      tr.appendChild(cell);
    });
    return tr;
  }

  // A page's submit: the address takes the form's state, the previous answer is cleared, the request posted (as
  // `wrap` makes it the endpoint's body, where the page has one); the answer goes to `show`, a refusal to the page's
  // alert. `page`: { fields, path, working, clear, show, $, wrap? }.
  async function submit(page, event) {
    if (event) event.preventDefault();
    const $ = page.$;
    const [request, state] = read(page.fields);
    window.history.replaceState(null, "", "?" + state.toString());
    page.clear();
    $("error").hidden = true;
    $("status").textContent = page.working;
    let answer;
    try {
      answer = await post(page.path, page.wrap ? page.wrap(request) : request);
    } catch (error) {
      $("error").textContent = error.message;
      $("error").hidden = false;
      $("status").textContent = "The service refused the request.";
      return;
    }
    page.show(answer, request);
  }

  return { $, api, schemas, build, fill, read, seconds, number, post, row, submit };
})();
